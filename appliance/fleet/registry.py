"""The connected workers, in memory (rebuilt from the workers' own hellos after a restart)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from appliance.fleet.protocol import Capabilities


@dataclass
class Worker:
    worker_id: str
    account_id: int
    account_email: str
    capabilities: Capabilities
    client: str
    send: Callable[[object], Awaitable[None]]
    close: Callable[[int, str], Awaitable[None]]
    connected_at: float = field(default_factory=time.time)
    last_seen: float = field(default_factory=time.monotonic)
    rtt_ms: float | None = None
    paused: bool = False
    busy: bool = False
    blobs: int = 0
    bytes_held: int = 0
    # "direct", "relay" or "unreachable" once the appliance's probe has run, and its round trip.
    connectivity: str | None = None
    probe_rtt_ms: float | None = None

    @property
    def state(self) -> str:
        return "paused" if self.paused else "busy" if self.busy else "idle"


class Fleet:
    def __init__(self) -> None:
        self.workers: dict[str, Worker] = {}

    def add(self, worker: Worker) -> bool:
        """False when this worker id is already connected (a duplicated tab copies its id)."""
        if worker.worker_id in self.workers:
            return False
        self.workers[worker.worker_id] = worker
        return True

    def remove(self, worker: Worker) -> None:
        if self.workers.get(worker.worker_id) is worker:
            del self.workers[worker.worker_id]

    def get(self, worker_id: str) -> Worker | None:
        return self.workers.get(worker_id)

    def visible_to(self, account_id: int, is_admin: bool) -> list[Worker]:
        """Admins see the fleet; everyone else their own browsers."""
        workers = [w for w in self.workers.values() if is_admin or w.account_id == account_id]
        return sorted(workers, key=lambda w: (w.account_email, w.connected_at))
