"""One TURN allocation: its relay socket, permissions, channels, lifetime, byte counts and rate cap."""

from __future__ import annotations

import asyncio
import collections
import secrets
import socket
import time
from collections.abc import Callable
from typing import NamedTuple

from appliance.turn.credentials import Identity

DEFAULT_LIFETIME = 600
MAX_LIFETIME = 3600
PERMISSION_LIFETIME = 300
CHANNEL_LIFETIME = 600


class FiveTuple(NamedTuple):
    protocol: str  # "udp" or "tcp": the client's transport to us
    client: tuple[str, int]
    server: tuple[str, int]


class TokenBucket:
    """Bytes per second with a one-second burst; rate 0 means unlimited."""

    def __init__(self, rate: int):
        self.rate = rate
        self.tokens = float(rate)
        self.stamp = time.monotonic()

    def take(self, size: int) -> bool:
        if not self.rate:
            return True
        now = time.monotonic()
        self.tokens = min(self.rate, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < size:
            return False
        self.tokens -= size
        return True


class RelaySocket:
    """The allocation's UDP socket towards peers, read through the event loop's reader callbacks.

    Registered synchronously (no await), so an Allocate request is answered in
    the same step that receives it and a retransmission cannot race it.
    """

    MAX_DATAGRAM = 65_535
    # Datagrams held while the kernel's send buffer is full; past this they are dropped.
    MAX_BACKLOG = 4 * 1024 * 1024

    def __init__(self, sock: socket.socket, on_datagram: Callable[[bytes, tuple[str, int]], None]):
        self.sock = sock
        self.on_datagram = on_datagram
        sock.setblocking(False)
        self.loop = asyncio.get_running_loop()
        self.backlog: collections.deque[tuple[bytes, tuple[str, int]]] = collections.deque()
        self.backlog_bytes = 0
        self.loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        for _ in range(64):  # bounded, so one busy peer cannot starve the loop
            try:
                data, addr = self.sock.recvfrom(self.MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                continue  # an ICMP error from a peer surfaces here; nothing to do
            self.on_datagram(data, (addr[0], addr[1]))

    def sendto(self, data: bytes, peer: tuple[str, int]) -> None:
        if self.backlog:
            self._queue(data, peer)
            return
        try:
            self.sock.sendto(data, peer)
        except (BlockingIOError, InterruptedError):
            # The kernel's send buffer is full (a TCP client delivers bursts): wait for room, do not drop.
            self._queue(data, peer)
            self.loop.add_writer(self.sock.fileno(), self._writable)
        except OSError:
            pass  # an unreachable peer: the datagram is lost, as UDP would lose it

    def _queue(self, data: bytes, peer: tuple[str, int]) -> None:
        if self.backlog_bytes + len(data) <= self.MAX_BACKLOG:
            self.backlog.append((data, peer))
            self.backlog_bytes += len(data)

    def _writable(self) -> None:
        while self.backlog:
            data, peer = self.backlog[0]
            try:
                self.sock.sendto(data, peer)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                pass
            self.backlog.popleft()
            self.backlog_bytes -= len(data)
        self.loop.remove_writer(self.sock.fileno())

    def close(self) -> None:
        self.loop.remove_reader(self.sock.fileno())
        self.loop.remove_writer(self.sock.fileno())
        self.sock.close()


class Allocation:
    def __init__(
        self,
        five_tuple: FiveTuple,
        identity: Identity,
        username: str,
        key: bytes,
        lifetime: int,
        bandwidth: int,
    ):
        self.id = secrets.token_hex(8)
        self.five_tuple = five_tuple
        self.identity = identity
        self.username = username
        self.key = key
        self.started = time.time()
        self.expires = time.monotonic() + lifetime
        self.permissions: dict[str, float] = {}  # peer IP -> expiry (monotonic)
        # Peer IPs the policy refuses but which hold relay addresses of this server: only those
        # relay ports may be reached there (see TurnServer._checked_peers).
        self.relay_only: set[str] = set()
        self.channels: dict[int, tuple[tuple[str, int], float]] = {}  # number -> (peer, expiry)
        self.channel_of_peer: dict[tuple[str, int], int] = {}
        self.relay_address: tuple[str, int] | None = None
        self.relay: RelaySocket | None = None
        self.bytes_to_peer = 0
        self.bytes_from_peer = 0
        self.metered_to_peer = 0
        self.metered_from_peer = 0
        self.recorded = False  # has a RelayUsage row
        self.refusals = 0  # permissions refused (refusals.py logs the first few)
        self.to_peer_bucket = TokenBucket(bandwidth)
        self.from_peer_bucket = TokenBucket(bandwidth)
        # The last successful Allocate response, resent on a retransmission (RFC 8656 §7.2).
        self.allocate_transaction: bytes | None = None
        self.allocate_response: bytes | None = None

    def refresh(self, lifetime: int) -> None:
        self.expires = time.monotonic() + lifetime

    def expired(self, now: float) -> bool:
        return now >= self.expires

    def permit(self, peer_ip: str, relay_only: bool = False) -> None:
        self.permissions[peer_ip] = time.monotonic() + PERMISSION_LIFETIME
        if relay_only:
            self.relay_only.add(peer_ip)
        else:
            self.relay_only.discard(peer_ip)

    def permitted(self, peer_ip: str) -> bool:
        expiry = self.permissions.get(peer_ip)
        return expiry is not None and expiry > time.monotonic()

    def bind_channel(self, number: int, peer: tuple[str, int], relay_only: bool = False) -> bool:
        """False when the number or the peer is already bound to something else (RFC 8656 §11.2)."""
        bound = self.channels.get(number)
        if bound and bound[0] != peer:
            return False
        if self.channel_of_peer.get(peer, number) != number:
            return False
        self.channels[number] = (peer, time.monotonic() + CHANNEL_LIFETIME)
        self.channel_of_peer[peer] = number
        self.permit(peer[0], relay_only)
        return True

    def channel_peer(self, number: int) -> tuple[str, int] | None:
        bound = self.channels.get(number)
        return bound[0] if bound and bound[1] > time.monotonic() else None

    def sweep(self, now: float) -> None:
        self.permissions = {ip: t for ip, t in self.permissions.items() if t > now}
        self.relay_only &= self.permissions.keys()
        for number, (peer, expiry) in list(self.channels.items()):
            if expiry <= now:
                del self.channels[number]
                self.channel_of_peer.pop(peer, None)

    def close(self) -> None:
        if self.relay is not None:
            self.relay.close()
            self.relay = None
