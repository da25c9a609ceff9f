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

from prometheus_client import Counter

TRANSFER_TIMEOUT = 120.0
# A finished transfer still takes the late end's byte report for this long (billing counts the smaller).
REPORT_GRACE = 30.0


# Bytes between browsers over WebRTC (relayed by TURN, they also count in peermr_turn_relayed_bytes_total):
# kind="blob", blob copies; kind="link", a run's links (peer messages, collectives), as billing counts them.
PEER_BYTES = Counter("peermr_peer_bytes_total", "Bytes moved between worker browsers", ["kind"])
BLOB_BYTES = PEER_BYTES.labels(kind="blob")
LINK_BYTES = PEER_BYTES.labels(kind="link")


@dataclass(frozen=True)
class TransferTag:
    """On whose behalf a transfer runs, for billing: the account charged, its run, private mode."""

    account: int
    run: int | None = None
    private: bool = False


class Pairing:
    """The two workers a transfer or link joins (they may signal each other) and what each reported."""

    source: str
    target: str
    reported: dict[str, int]

    def peer_of(self, worker_id: str) -> str | None:
        if worker_id == self.source:
            return self.target
        if worker_id == self.target:
            return self.source
        return None

    @property
    def counted_bytes(self) -> int:
        return min(self.reported.values()) if len(self.reported) == 2 else 0


@dataclass
class Transfer(Pairing):
    id: str
    sha256: str
    size: int
    source: str  # worker ids
    target: str
    started: float = field(default_factory=time.monotonic)
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    # Bytes each end says it moved; the smaller counts (one browser cannot inflate it).
    reported: dict[str, int] = field(default_factory=dict)
    tag: TransferTag | None = None
    # Worker id -> account id of both ends, as they were when the transfer was arranged.
    accounts: dict[str, int] = field(default_factory=dict)
    # Both ends report before the blob is confirmed: nothing more to wait for (a Link waits).
    settle_seconds: float = 0.0
    # When either end last showed the copy moving (a byte report or a signal): see Fleet.copy_blob.
    progressed: float = field(default_factory=time.monotonic)

    def moved(self) -> None:
        self.progressed = time.monotonic()

    @property
    def all_in(self) -> bool:
        """The target said every byte arrived (it verifies and stores them now)."""
        return self.reported.get(self.target, -1) >= self.size


@dataclass
class Link(Pairing):
    """A direct browser-to-browser link between two ranks' workers of a run (peer messages, collectives).

    Metered like a transfer when it closes: each end reports the bytes it moved through the link
    (both ways, cumulative); the smaller report counts."""

    id: str
    source: str  # worker ids
    target: str
    run_id: int
    tag: TransferTag | None = None
    accounts: dict[str, int] = field(default_factory=dict)
    reported: dict[str, int] = field(default_factory=dict)
    # What peermr_peer_bytes_total has of it: the counted bytes as they grow with the reports.
    exported: int = 0
    # Pages report before their task-done, so the reports are in when the run ends; a link closed
    # because a worker left may still get the other end's last report within this.
    settle_seconds: float = 2.0


class Transfers:
    def __init__(self) -> None:
        self.active: dict[str, Transfer] = {}
        # Finished transfers by id, with when they finished: a byte report may arrive after the end.
        self.recent: dict[str, tuple[Transfer, float]] = {}
        # Links live until their run ends (close_links) or one end leaves; closed ones take late reports.
        self.links: dict[str, Link] = {}
        self.recent_links: dict[str, tuple[Link, float]] = {}

    def link(self, source: str, target: str, run_id: int, tag: TransferTag, accounts: dict[str, int]) -> Link:
        link = Link(secrets.token_hex(8), source, target, run_id, tag, dict(accounts))
        self.links[link.id] = link
        return link

    def close_links(self, run_id: int | None = None, worker_id: str | None = None) -> list[Link]:
        """Forget the links of a run, or of a worker that left; those that carried bytes, to meter."""
        closed = [
            link
            for link in self.links.values()
            if link.run_id == run_id or (worker_id is not None and link.peer_of(worker_id) is not None)
        ]
        now = time.monotonic()
        for link in closed:
            del self.links[link.id]
            self.recent_links[link.id] = (link, now)
        return [link for link in closed if link.reported]

    def pairing(self, signal_id: str) -> Transfer | Link | None:
        """The transfer or link a signal id names: its two ends may exchange SDP and candidates."""
        return self.active.get(signal_id) or self.links.get(signal_id)

    def arrange(
        self,
        sha256: str,
        size: int,
        source: str,
        target: str,
        tag: TransferTag | None = None,
        accounts: dict[str, int] | None = None,
    ) -> Transfer:
        self.expire()
        transfer = Transfer(secrets.token_hex(8), sha256, size, source, target, tag=tag, accounts=dict(accounts or {}))
        self.active[transfer.id] = transfer
        return transfer

    def report(self, transfer_id: str, worker_id: str, size: int) -> None:
        """An end's count of the bytes it moved (kept only from the transfer's or link's two ends)."""
        transfer = self.active.get(transfer_id) or self.recent.get(transfer_id, (None, 0.0))[0]
        if transfer is not None and transfer.peer_of(worker_id) is not None:
            transfer.reported[worker_id] = max(0, min(size, transfer.size))
            transfer.moved()
            return
        link = self.links.get(transfer_id) or self.recent_links.get(transfer_id, (None, 0.0))[0]
        if link is not None and link.peer_of(worker_id) is not None:
            link.reported[worker_id] = max(0, size)  # cumulative: the latest report holds
            # Counted as the pages report (about once a second), not only when billing meters the link.
            if (grown := link.counted_bytes - link.exported) > 0:
                LINK_BYTES.inc(grown)
                link.exported += grown

    def get(self, transfer_id: str) -> Transfer | None:
        return self.active.get(transfer_id)

    def finish(self, transfer: Transfer, ok: bool, reason: str = "") -> None:
        if ok and self.active.get(transfer.id) is transfer:
            BLOB_BYTES.inc(transfer.size)
        self.active.pop(transfer.id, None)
        self.recent[transfer.id] = (transfer, time.monotonic())
        if not transfer.done.done():
            transfer.done.set_result((ok, reason))

    def involving(self, worker_id: str) -> list[Transfer]:
        return [t for t in self.active.values() if worker_id in (t.source, t.target)]

    def expire(self) -> None:
        now = time.monotonic()
        for transfer_id, (_, finished) in list(self.recent.items()):
            if now - finished > REPORT_GRACE:
                del self.recent[transfer_id]
        for link_id, (_, closed) in list(self.recent_links.items()):
            if now - closed > REPORT_GRACE:
                del self.recent_links[link_id]
        for transfer in list(self.active.values()):
            if now - transfer.started > TRANSFER_TIMEOUT:
                self.finish(transfer, False, "timed out")
