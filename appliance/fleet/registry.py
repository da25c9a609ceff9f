"""The connected workers, in memory (rebuilt from the workers' own hellos after a restart)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from appliance.events import EventHub, SessionsEnded
from appliance.fleet import protocol as p
from appliance.fleet.probe import CONCURRENT_PROBES, Turns
from appliance.fleet.protocol import Capabilities
from appliance.fleet.transfers import Transfer, Transfers, TransferTag

if TYPE_CHECKING:
    from appliance.fleet.connection import Session as Connection

log = logging.getLogger(__name__)


# A copy between two tabs that has not finished by then is given up (and tried again by the caller):
# a connection that died without a word (a frozen tab, lapsed ICE consent) must not stall a run for minutes.
COPY_TIMEOUT_BASE = 30.0
COPY_MIN_BYTES_PER_SECOND = 1024 * 1024
# A copy for a run fails sooner: once neither end has shown it moving (a byte report, a signal) for
# COPY_STALL_SECONDS plus a few round trips of the two ends, the caller asks another holder.
COPY_STALL_SECONDS = 2.0
COPY_STALL_RTTS = 4


# The appliance pings each idle worker this often; without a pong for SILENCE_LIMIT the worker is gone.
PING_SECONDS = 15
SILENCE_LIMIT = 3 * PING_SECONDS
# A worker serving a run is pinged every second, and is gone once a ping has gone unanswered for
# BUSY_SILENCE_SECONDS plus a few of its round trips: a frozen browser costs its run seconds, while
# thousands of idle ones still cost one ping each every PING_SECONDS.
BUSY_PING_SECONDS = 1.0
BUSY_SILENCE_SECONDS = 3.0
BUSY_SILENCE_RTTS = 4


def copy_timeout(size: int) -> float:
    return COPY_TIMEOUT_BASE + size / COPY_MIN_BYTES_PER_SECOND


def copy_stall(source: Worker, target: Worker) -> float:
    rtts = ((source.rtt_ms or 0.0) + (target.rtt_ms or 0.0)) / 1000
    return COPY_STALL_SECONDS + COPY_STALL_RTTS * rtts


@dataclass
class Worker:
    worker_id: str
    account_id: int
    account_email: str
    capabilities: Capabilities
    client: str
    send: Callable[[object], Awaitable[None]]
    close: Callable[[int, str], Awaitable[None]]
    # Sends at once, without awaiting (False: the socket is closed), where the socket takes frames
    # without waiting (an edge's, through Redis); None where every send must be awaited.
    send_now: Callable[[object], bool] | None = None
    connected_at: float = field(default_factory=time.time)
    last_seen: float = field(default_factory=time.monotonic)
    rtt_ms: float | None = None
    store_wait_ms: int = 0  # as its last pong said: its browser process hangs when this grows
    paused: bool = False
    pause_reason: str = ""
    # The PMRFS replicas the namenode records on this tab (placement spreads by them).
    blobs: int = 0
    bytes_held: int = 0
    # Everything the tab's store holds (PMRFS replicas and run blobs), as its last `stored` said;
    # None until it said so.
    stored_blobs: int | None = None
    stored_bytes: int = 0
    # Tasks it reported done since it connected.
    tasks_done: int = 0
    # "direct", "relay" or "unreachable" once the appliance's probe has run, and its round trip.
    connectivity: str | None = None
    probe_rtt_ms: float | None = None
    # Reliability from past runs (higher first when choosing workers for a run).
    score: float = 0.0
    # The run this worker serves (holds a rank in, or helps), if any: set by serve().
    run_id: int | None = None
    # The page load the connection comes from (its hello says): a browser whose page started again
    # under the same worker id is another peer, whose old connections are gone.
    instance: str = ""
    # What its idle connection waits on until the next ping: serve() ends the wait early, so that
    # a worker given a run is pinged often from then on (a bare future: thousands wait at once).
    nudge: asyncio.Future | None = None

    # Requests to this worker waiting for the reply that names their id.
    pending: dict[int, asyncio.Future] = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1_000_000))

    @property
    def busy(self) -> bool:
        return self.run_id is not None

    def serve(self, run_id: int | None) -> None:
        """Serve a run (or none); only the engine's placement calls it."""
        self.run_id = run_id
        if run_id is not None and self.nudge is not None and not self.nudge.done():
            self.nudge.set_result(None)

    def silence_limit(self) -> float:
        """How long a ping may go unanswered before the worker is taken for gone."""
        if not self.busy:
            return SILENCE_LIMIT
        return BUSY_SILENCE_SECONDS + BUSY_SILENCE_RTTS * (self.rtt_ms or 0.0) / 1000

    def answers(self, now: float) -> bool:
        """It answered a ping (or sent anything) within half its silence limit."""
        return now - self.last_seen <= self.silence_limit() / 2

    @property
    def state(self) -> str:
        return "paused" if self.paused else "busy" if self.busy else "idle"

    async def request(self, make: Callable[[int], object], timeout: float) -> object:
        """Send ``make(id)`` and wait for the worker's reply to that id."""
        request_id = next(self._ids)
        reply = asyncio.get_running_loop().create_future()
        self.pending[request_id] = reply
        try:
            await self.send(make(request_id))
            return await asyncio.wait_for(reply, timeout)
        finally:
            self.pending.pop(request_id, None)

    def resolve(self, request_id: int | None, message: object) -> None:
        reply = self.pending.pop(request_id, None) if request_id is not None else None
        if reply is not None and not reply.done():
            reply.set_result(message)


class Fleet:
    def __init__(self, events: EventHub) -> None:
        self.workers: dict[str, Worker] = {}
        self.transfers = Transfers()
        # What the fleet publishes (workers joining and leaving, their blobs, transfers, task messages).
        self.events = events
        # The appliance's connectivity probes of joining workers take turns (fleet/probe.py).
        self.probe_turns = Turns(CONCURRENT_PROBES)
        # The open connections by the session they were opened with (its key's hash): they close when it ends.
        self.connections: dict[str, set[Connection]] = {}

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

    async def sessions_ended(self, event: SessionsEnded) -> None:
        """Close the connections opened with sessions that ended."""
        for key_hash in event.key_hashes:
            for connection in list(self.connections.get(key_hash, ())):
                await connection.end(event.reason)

    async def copy_blob(
        self,
        sha: str,
        size: int,
        source: Worker,
        target: Worker,
        timeout: float,
        tag: TransferTag | None = None,
        stall: float | None = None,
    ) -> bool:
        """Have ``source`` send a blob it holds to ``target`` over WebRTC; True once the target verified it.

        ``tag`` names the account (and run) the copy is made for; billing meters tagged transfers. With
        ``stall``, the copy also fails once it has not moved for that long (until all its bytes are in)."""
        accounts = {source.worker_id: source.account_id, target.worker_id: target.account_id}
        transfer = self.transfers.arrange(sha, size, source.worker_id, target.worker_id, tag, accounts)
        await target.send(
            p.BlobReceive(
                transfer_id=transfer.id, sha256=sha, size=size, from_=source.worker_id, from_instance=source.instance
            )
        )
        await source.send(
            p.BlobSend(transfer_id=transfer.id, sha256=sha, to=target.worker_id, to_instance=target.instance)
        )
        return await self._settled(transfer, timeout, stall)

    async def _settled(self, transfer: Transfer, timeout: float, stall: float | None) -> bool:
        deadline = transfer.started + timeout
        while True:
            now = time.monotonic()
            wait = deadline - now
            if stall is not None and not transfer.all_in:
                wait = min(wait, transfer.progressed + stall - now)
            if wait <= 0:
                reason = "timed out" if now >= deadline else f"it did not move for {stall:.1f} s"
                self.transfers.finish(transfer, False, reason)
                return False
            try:
                ok, _ = await asyncio.wait_for(asyncio.shield(transfer.done), wait)
                return ok
            except TimeoutError:
                continue
