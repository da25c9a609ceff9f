"""Connectivity probe: the appliance's own WebRTC peer (aiortc) opens a data channel to a new worker.

It records whether the worker connected directly, only through the TURN relay,
or not at all, and the round-trip time over the channel. The scheduler and the
fleet view use it to know which workers will cost relay bytes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from aiortc import RTCPeerConnection, RTCSessionDescription

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 20.0
ECHOES = 3
# Probes wait their turn: a WebRTC peer costs memory and CPU, and a whole fleet may join at once.
CONCURRENT_PROBES = 4

DIRECT = "direct"
RELAY = "relay"
UNREACHABLE = "unreachable"


class Place:
    """A place in Turns' line: ``start`` is called when its turn comes, unless it gave up first."""

    __slots__ = ("start",)

    def __init__(self, start: Callable[[], object]):
        self.start: Callable[[], object] | None = start

    def give_up(self) -> None:
        """Leave the line in O(1): the place stays until it is skipped."""
        self.start = None


class Turns:
    """At most ``limit`` at once, the others waiting in arrival order. Not asyncio.Semaphore: a waiter
    that gives up (a worker that left before its probe) removes itself from the Semaphore's queue by
    a scan of it, and a fleet of tens of thousands waits there (the edge of 10,000 sockets that dies,
    or a whole fleet at a restart, costs a scan of the queue each). Nor a task per waiter: a place
    in line is one small object, where a waiting task held ~25 (its coroutines, futures, context)."""

    def __init__(self, limit: int):
        self.free = limit
        self.waiting: collections.deque[Place] = collections.deque()

    def take(self, start: Callable[[], object]) -> Place:
        """``start()`` is called once a turn is the caller's (at once if one is free); whoever holds a
        turn hands it on with done()."""
        place = Place(start)
        if self.free > 0:  # then nobody waits: a turn freed goes to the first live waiter first
            self.free -= 1
            place.start = None
            start()
        else:
            self.waiting.append(place)
        return place

    def done(self) -> None:
        """A turn ends: the first waiter still in line takes it."""
        while self.waiting:
            place = self.waiting.popleft()
            if (start := place.start) is not None:
                place.start = None
                start()
                return
        self.free += 1


async def probe(exchange: Callable[[str], Awaitable[str]]) -> tuple[str, float | None]:
    """(connectivity, round-trip ms). ``exchange`` sends our SDP offer to the worker and returns its
    answer. Run it with a turn of the fleet's Turns (CONCURRENT_PROBES at once)."""
    # No ICE servers on our side: the appliance is the server, its host candidates are what workers reach.
    pc = RTCPeerConnection()
    try:
        return await asyncio.wait_for(_run(pc, exchange), PROBE_TIMEOUT)
    except Exception as exc:  # any failure means the worker could not be reached this way
        log.info("probe failed: %s", exc or type(exc).__name__)
        return UNREACHABLE, None
    finally:
        with contextlib.suppress(Exception):
            await pc.close()


async def _run(pc: RTCPeerConnection, exchange) -> tuple[str, float]:
    channel = pc.createDataChannel("probe")
    opened = asyncio.get_running_loop().create_future()
    echoes: asyncio.Queue[str] = asyncio.Queue()
    channel.on("open", lambda: opened.done() or opened.set_result(None))
    channel.on("message", echoes.put_nowait)
    await pc.setLocalDescription(await pc.createOffer())
    answer = await exchange(pc.localDescription.sdp)
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    await opened
    rtts = []
    for n in range(ECHOES):
        started = time.perf_counter()
        channel.send(f"probe-{n}")
        while await echoes.get() != f"probe-{n}":
            pass
        rtts.append((time.perf_counter() - started) * 1000)
    return _path(pc), min(rtts)


def _path(pc: RTCPeerConnection) -> str:
    # aiortc exposes no selected candidate pair; aioice's connection knows the nominated one.
    ice = pc.sctp.transport.transport._connection  # noqa: SLF001
    pairs = list(ice._nominated.values())  # noqa: SLF001
    relayed = any("relay" in (pair.local_candidate.type, pair.remote_candidate.type) for pair in pairs)
    return RELAY if relayed else DIRECT
