"""The addresses connected workers announced as their ICE candidates: the peers the relay serves.

A worker's signalling passes through the appliance (candidates it trickles to the other end of a
transfer or link, the `a=candidate:` lines of its descriptions, its answer to the appliance's
probe); the fleet publishes each candidate's address (events.CandidatesAnnounced) and this set
keeps them per worker. A worker's addresses stay a grace (turn_peer_grace_seconds) after it
leaves, so a tab that reconnects at once does not lose the relay under a connection still in use.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable

from appliance.turn.policy import Address, address_of

# A browser has a handful of candidates; past this a worker's oldest addresses make room.
PER_WORKER = 32


class AnnouncedPeers:
    def __init__(self, grace: float, per_worker: int = PER_WORKER):
        self.grace = grace
        self.per_worker = per_worker
        self._of: dict[str, dict[Address, None]] = {}  # worker id -> its addresses, oldest first
        self._holders: Counter[Address] = Counter()  # address -> how many workers announced it
        self._leaving: dict[str, asyncio.TimerHandle] = {}

    def __contains__(self, address: object) -> bool:
        return address in self._holders

    def announce(self, worker_id: str, hosts: Iterable[str]) -> None:
        mine = self._of.setdefault(worker_id, {})
        for host in hosts:
            address = address_of(host)
            if address is None:
                continue
            known = address in mine
            mine.pop(address, None)
            mine[address] = None  # the newest now
            if known:
                continue
            self._holders[address] += 1
            if len(mine) > self.per_worker:
                self._release(mine, next(iter(mine)))

    def leave(self, worker_id: str) -> None:
        """The worker disconnected: forget its addresses after the grace, unless it comes back."""
        if worker_id in self._of and worker_id not in self._leaving:
            self._leaving[worker_id] = asyncio.get_running_loop().call_later(self.grace, self.forget, worker_id)

    def stay(self, worker_id: str) -> None:
        """The worker (re)connected: keep its addresses."""
        timer = self._leaving.pop(worker_id, None)
        if timer is not None:
            timer.cancel()

    def forget(self, worker_id: str) -> None:
        self.stay(worker_id)
        mine = self._of.pop(worker_id, {})
        for address in list(mine):
            self._release(mine, address)

    def close(self) -> None:
        for timer in self._leaving.values():
            timer.cancel()
        self._leaving.clear()

    def _release(self, mine: dict[Address, None], address: Address) -> None:
        del mine[address]
        self._holders[address] -= 1
        if self._holders[address] <= 0:
            del self._holders[address]
