"""Browser-to-browser transfers the namenode arranged, and the signaling allowed for them.

A browser may only exchange SDP and ICE candidates with the one peer of a
transfer the appliance set up; it cannot open connections to arbitrary
workers, and the namenode never pairs a private bucket's blob with another
account's worker.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field

TRANSFER_TIMEOUT = 120.0


@dataclass
class Transfer:
    id: str
    sha256: str
    size: int
    source: str  # worker ids
    target: str
    started: float = field(default_factory=time.monotonic)
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    # Bytes each end says it moved; the smaller counts (one browser cannot inflate it).
    reported: dict[str, int] = field(default_factory=dict)

    def peer_of(self, worker_id: str) -> str | None:
        if worker_id == self.source:
            return self.target
        if worker_id == self.target:
            return self.source
        return None

    @property
    def counted_bytes(self) -> int:
        return min(self.reported.values()) if len(self.reported) == 2 else 0


class Transfers:
    def __init__(self) -> None:
        self.active: dict[str, Transfer] = {}

    def arrange(self, sha256: str, size: int, source: str, target: str) -> Transfer:
        self.expire()
        transfer = Transfer(secrets.token_hex(8), sha256, size, source, target)
        self.active[transfer.id] = transfer
        return transfer

    def get(self, transfer_id: str) -> Transfer | None:
        return self.active.get(transfer_id)

    def finish(self, transfer: Transfer, ok: bool, reason: str = "") -> None:
        self.active.pop(transfer.id, None)
        if not transfer.done.done():
            transfer.done.set_result((ok, reason))

    def involving(self, worker_id: str) -> list[Transfer]:
        return [t for t in self.active.values() if worker_id in (t.source, t.target)]

    def expire(self) -> None:
        now = time.monotonic()
        for transfer in list(self.active.values()):
            if now - transfer.started > TRANSFER_TIMEOUT:
                self.finish(transfer, False, "timed out")
