"""The embedded TURN/STUN server (RFC 8489 Binding, RFC 8656 TURN) over UDP and TCP.

Runs in the appliance's event loop. Clients authenticate with coturn-style REST
credentials (see credentials.py); every relayed payload byte is counted on the
allocation and handed to the meter, which attributes it to the account and run
named in the username.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
import socket
import time
from collections import Counter
from collections.abc import Callable

from appliance.background import BackgroundTasks
from appliance.turn import stun
from appliance.turn.allocation import DEFAULT_LIFETIME, MAX_LIFETIME, Allocation, FiveTuple, RelaySocket
from appliance.turn.credentials import NonceBook, parse_username, password_for
from appliance.turn.policy import PeerPolicy
from appliance.turn.refusals import refused
from appliance.turn.stun import Class, Message, Method, StunError

log = logging.getLogger(__name__)

SOFTWARE = "PeerMR TURN"
UDP = 17
MAX_TCP_FRAME = 65_535 + 20
SWEEP_INTERVAL = 1.0
# A port reserved with EVEN-PORT's R bit is held this long (RFC 8656 §7.2 suggests about 30 s).
RESERVATION_LIFETIME = 30.0

REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    420: "Unknown Attribute",
    437: "Allocation Mismatch",
    438: "Stale Nonce",
    440: "Address Family not Supported",
    441: "Wrong Credentials",
    442: "Unsupported Transport Protocol",
    486: "Allocation Quota Reached",
    508: "Insufficient Capacity",
}


class Reply(Exception):
    """Answer the request with this error code (and extra attributes)."""

    def __init__(self, code: int, attributes: list | None = None, authenticated: bool = True):
        super().__init__(code)
        self.code = code
        self.attributes = attributes or []
        self.authenticated = authenticated


class Client:
    """The client end of a five-tuple: how to send it bytes."""

    def __init__(self, five_tuple: FiveTuple, send: Callable[[bytes], None]):
        self.five_tuple = five_tuple
        self.send = send

    @property
    def stream(self) -> bool:
        return self.five_tuple.protocol == "tcp"


class TurnServer:
    def __init__(
        self,
        *,
        secret: str,
        realm: str,
        policy: Callable[[], PeerPolicy],
        min_port: int,
        max_port: int,
        max_allocations: int,
        max_allocations_per_account: int,
        bandwidth: int,
        nonce_lifetime: int = 600,
        on_allocation_end: Callable[[Allocation], None] = lambda allocation: None,
    ):
        self.secret = secret
        self.realm = realm
        self.policy = policy
        self.min_port = min_port
        self.max_port = max_port
        self.max_allocations = max_allocations
        self.max_per_account = max_allocations_per_account
        self.bandwidth = bandwidth
        self.on_allocation_end = on_allocation_end
        self.nonces = NonceBook(lifetime=nonce_lifetime)
        self.allocations: dict[FiveTuple, Allocation] = {}
        self.per_account: Counter[str] = Counter()
        self.ports_in_use: set[int] = set()
        self.relay_addresses: set[tuple[str, int]] = set()
        # RESERVATION-TOKEN -> (bound socket, host, port, expiry) held for a second Allocate.
        self.reservations: dict[bytes, tuple[socket.socket, str, int, float]] = {}
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.base_events.Server | None = None
        self._sweeps = BackgroundTasks("TURN server")
        # Each live five-tuple's sender, registered by the listeners.
        self._clients: dict[FiveTuple, Client] = {}

    # ----------------------------------------------------------------- lifecycle

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._udp, _ = await loop.create_datagram_endpoint(lambda: _UdpListener(self), local_addr=(host, port))
        _large_buffers(self._udp.get_extra_info("socket"))
        self._tcp = await loop.create_server(lambda: _TcpConnection(self), host, port)
        self._sweeps.every(SWEEP_INTERVAL, self._sweep)
        log.info("TURN listening on %s:%d (UDP and TCP)", host, port)

    async def stop(self) -> None:
        await self._sweeps.cancel()
        for allocation in list(self.allocations.values()):
            self._end(allocation)
        self._expire_reservations(float("inf"))
        if self._udp:
            self._udp.close()
        if self._tcp:
            self._tcp.close()
            await self._tcp.wait_closed()

    async def _sweep(self) -> None:
        now = time.monotonic()
        self._expire_reservations(now)
        for allocation in list(self.allocations.values()):
            if allocation.expired(now):
                self._end(allocation)
            else:
                allocation.sweep(now)

    def _end(self, allocation: Allocation) -> None:
        if self.allocations.pop(allocation.five_tuple, None) is None:
            return
        self.per_account[allocation.identity.account] -= 1
        if allocation.relay_address:
            self.ports_in_use.discard(allocation.relay_address[1])
            self.relay_addresses.discard(allocation.relay_address)
        allocation.close()
        if allocation.five_tuple.protocol == "udp":
            self.unregister(allocation.five_tuple)
        self.on_allocation_end(allocation)

    def connection_lost(self, five_tuple: FiveTuple) -> None:
        """A TCP client went away: its allocation goes with it (RFC 8656 §3.1)."""
        allocation = self.allocations.get(five_tuple)
        if allocation:
            self._end(allocation)

    # ----------------------------------------------------------------- input

    def packet(self, data: bytes, client: Client) -> None:
        """One datagram (UDP) or frame (TCP) from a client; never raises for bad input."""
        try:
            if stun.is_channel_data(data):
                self._channel_data(data, client)
            elif stun.is_stun(data):
                self._stun(data, client)
        except StunError as exc:
            log.debug("dropped malformed packet from %s: %s", client.five_tuple.client, exc)

    def _stun(self, data: bytes, client: Client) -> None:
        try:
            message = stun.decode(data)
        except StunError as exc:
            # A request whose header we can read still deserves an answer.
            header = stun.request_header(data)
            if header:
                client.send(self._error(header[0], header[1], 400, [], None))
            log.debug("bad STUN from %s: %s", client.five_tuple.client, exc)
            return
        if message.msg_class == Class.INDICATION:
            if message.method == Method.SEND:
                self._send_indication(message, client)
            return
        if message.msg_class != Class.REQUEST:
            return
        key = None
        try:
            if message.method == Method.BINDING:
                response = self._binding(message, client)
            else:
                if message.unknown_required:
                    raise Reply(420, [("UNKNOWN-ATTRIBUTES", message.unknown_required)], authenticated=False)
                key, username = self._authenticate(message, data)
                handler = {
                    Method.ALLOCATE: self._allocate,
                    Method.REFRESH: self._refresh,
                    Method.CREATE_PERMISSION: self._create_permission,
                    Method.CHANNEL_BIND: self._channel_bind,
                }.get(message.method)
                if handler is None:
                    raise Reply(400)
                response = handler(message, client, key, username)
        except Reply as reply:
            response = self._error(
                message.method,
                message.transaction_id,
                reply.code,
                reply.attributes,
                key if reply.authenticated else None,
            )
        client.send(response)

    # ----------------------------------------------------------------- auth

    def _authenticate(self, message: Message, raw: bytes) -> tuple[bytes, str]:
        challenge = [("REALM", self.realm), ("NONCE", self.nonces.issue())]
        if message.get("MESSAGE-INTEGRITY") is None:
            raise Reply(401, challenge, authenticated=False)
        username, realm, nonce = message.get("USERNAME"), message.get("REALM"), message.get("NONCE")
        if username is None or realm is None or nonce is None:
            raise Reply(400, authenticated=False)
        if self.nonces.check(nonce) != "ok":
            raise Reply(438, challenge, authenticated=False)
        identity = parse_username(username)
        if realm != self.realm or identity is None or identity.expiry < time.time():
            raise Reply(401, challenge, authenticated=False)
        key = stun.long_term_key(username, self.realm, password_for(self.secret, username))
        if not stun.check_integrity(raw, key):
            raise Reply(401, challenge, authenticated=False)
        return key, username

    def _existing(self, client: Client, username: str) -> Allocation:
        allocation = self.allocations.get(client.five_tuple)
        if allocation is None:
            raise Reply(437)
        if allocation.username != username:
            raise Reply(441)
        return allocation

    # ----------------------------------------------------------------- requests

    def _binding(self, message: Message, client: Client) -> bytes:
        response = Message(Method.BINDING, Class.SUCCESS, message.transaction_id)
        response.add("XOR-MAPPED-ADDRESS", client.five_tuple.client).add("SOFTWARE", SOFTWARE)
        return stun.encode(response)

    def _allocate(self, message: Message, client: Client, key: bytes, username: str) -> bytes:
        existing = self.allocations.get(client.five_tuple)
        if existing is not None:
            if existing.allocate_transaction == message.transaction_id and existing.allocate_response:
                return existing.allocate_response
            raise Reply(437)
        _check_allocate_request(message)
        identity = parse_username(username)
        assert identity is not None
        if self.per_account[identity.account] >= self.max_per_account:
            raise Reply(486)
        if len(self.allocations) >= self.max_allocations:
            raise Reply(508)
        allocation = Allocation(
            client.five_tuple, identity, username, key, _lifetime(message.get("LIFETIME")), self.bandwidth
        )
        reserved_token = self._relay_port(allocation, message, _local_address_towards(client.five_tuple))
        self.allocations[client.five_tuple] = allocation
        self.per_account[identity.account] += 1
        response = Message(Method.ALLOCATE, Class.SUCCESS, message.transaction_id)
        response.add("XOR-RELAYED-ADDRESS", allocation.relay_address)
        response.add("LIFETIME", int(allocation.expires - time.monotonic() + 0.5))
        response.add("XOR-MAPPED-ADDRESS", client.five_tuple.client)
        if reserved_token is not None:
            response.add("RESERVATION-TOKEN", reserved_token)
        response.add("SOFTWARE", SOFTWARE)
        allocation.allocate_transaction = message.transaction_id
        allocation.allocate_response = stun.encode(response, integrity_key=key)
        return allocation.allocate_response

    def _relay_port(self, allocation: Allocation, message: Message, host: str) -> bytes | None:
        """Give the allocation its relay port: the one its RESERVATION-TOKEN holds, else a free one
        (even with EVEN-PORT, whose R bit holds the next one too). Returns the token of a port it held."""
        token = message.get("RESERVATION-TOKEN")
        if token is not None:
            if not self._take_reservation(allocation, token):
                raise Reply(508)  # unknown or expired reservation
            return None
        even_port = message.get("EVEN-PORT")
        opened = self._open_relay(allocation, host, even=even_port is not None, reserve_next=bool(even_port))
        if opened is None:
            raise Reply(508)
        return opened if isinstance(opened, bytes) else None

    def _bind(self, host: str, port: int) -> socket.socket | None:
        if port in self.ports_in_use or not self.min_port <= port <= self.max_port:
            return None
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
        _large_buffers(sock)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            return None
        self.ports_in_use.add(port)
        return sock

    def _open_relay(self, allocation: Allocation, host: str, even: bool, reserve_next: bool) -> bytes | None | bool:
        """Bind the allocation's relay port. With ``reserve_next`` (EVEN-PORT's R bit) the next port is
        held for a later Allocate that presents the returned RESERVATION-TOKEN (RFC 8656 §7.2)."""
        step = 2 if even or reserve_next else 1
        candidates = range(self.min_port + (self.min_port % 2 if step == 2 else 0), self.max_port + 1, step)
        free = [
            p for p in candidates if p not in self.ports_in_use and (not reserve_next or p + 1 not in self.ports_in_use)
        ]
        for port in random.sample(free, min(len(free), 64)):
            sock = self._bind(host, port)
            if sock is None:
                continue
            token = None
            if reserve_next:
                reserved = self._bind(host, port + 1)
                if reserved is None:
                    sock.close()
                    self.ports_in_use.discard(port)
                    continue
                token = secrets.token_bytes(8)
                self.reservations[token] = (reserved, host, port + 1, time.monotonic() + RESERVATION_LIFETIME)
            self._attach(allocation, sock, host, port)
            return token if reserve_next else True
        return None

    def _attach(self, allocation: Allocation, sock: socket.socket, host: str, port: int) -> None:
        allocation.relay = RelaySocket(sock, lambda data, peer: self._from_peer(allocation, data, peer))
        allocation.relay_address = (host, port)
        self.relay_addresses.add((host, port))

    def _take_reservation(self, allocation: Allocation, token: bytes) -> bool:
        reservation = self.reservations.pop(token, None)
        if reservation is None:
            return False
        sock, host, port, _ = reservation
        self._attach(allocation, sock, host, port)
        return True

    def _expire_reservations(self, now: float) -> None:
        for token, (sock, _, port, expiry) in list(self.reservations.items()):
            if expiry <= now:
                del self.reservations[token]
                sock.close()
                self.ports_in_use.discard(port)

    def _refresh(self, message: Message, client: Client, key: bytes, username: str) -> bytes:
        allocation = self._existing(client, username)
        requested = message.get("LIFETIME")
        response = Message(Method.REFRESH, Class.SUCCESS, message.transaction_id)
        if requested == 0:
            self._end(allocation)
            response.add("LIFETIME", 0)
        else:
            lifetime = _lifetime(requested)
            allocation.refresh(lifetime)
            response.add("LIFETIME", lifetime)
        response.add("SOFTWARE", SOFTWARE)
        return stun.encode(response, integrity_key=key)

    def _checked_peers(self, message: Message, allocation: Allocation) -> list[tuple[tuple[str, int], bool]]:
        """The request's peers, each with whether it is reachable only at our relay ports; 403 if any is refused.

        Two browsers relayed by this server talk to each other's relay addresses,
        which are the appliance's own: the policy refuses those addresses, but their
        live relay ports stay reachable (and nothing else on them, see _to_peer).
        """
        peers = message.get_all("XOR-PEER-ADDRESS")
        if not peers:
            raise Reply(400)
        policy = self.policy()
        checked = []
        for peer in peers:
            reason = policy.refusal(peer[0])
            if reason is None:
                checked.append((peer, False))
            elif peer in self.relay_addresses:
                checked.append((peer, True))
            else:
                refused(allocation, peer, reason)
                raise Reply(403)
        return checked

    def _create_permission(self, message: Message, client: Client, key: bytes, username: str) -> bytes:
        allocation = self._existing(client, username)
        for (host, _), relay_only in self._checked_peers(message, allocation):
            allocation.permit(host, relay_only)
        response = Message(Method.CREATE_PERMISSION, Class.SUCCESS, message.transaction_id).add("SOFTWARE", SOFTWARE)
        return stun.encode(response, integrity_key=key)

    def _channel_bind(self, message: Message, client: Client, key: bytes, username: str) -> bytes:
        allocation = self._existing(client, username)
        number = message.get("CHANNEL-NUMBER")
        if number is None or not stun.FIRST_CHANNEL <= number <= stun.LAST_CHANNEL:
            raise Reply(400)
        peers = self._checked_peers(message, allocation)
        if len(peers) != 1 or not allocation.bind_channel(number, *peers[0]):
            raise Reply(400)
        response = Message(Method.CHANNEL_BIND, Class.SUCCESS, message.transaction_id).add("SOFTWARE", SOFTWARE)
        return stun.encode(response, integrity_key=key)

    def _error(self, method: Method, transaction_id: bytes, code: int, attributes: list, key: bytes | None) -> bytes:
        response = Message(method, Class.ERROR, transaction_id)
        response.add("ERROR-CODE", (code, REASONS.get(code, "Error")))
        for name, value in attributes:
            response.add(name, value)
        response.add("SOFTWARE", SOFTWARE)
        return stun.encode(response, integrity_key=key)

    # ----------------------------------------------------------------- data

    def _send_indication(self, message: Message, client: Client) -> None:
        allocation = self.allocations.get(client.five_tuple)
        peer, data = message.get("XOR-PEER-ADDRESS"), message.get("DATA")
        if allocation is None or peer is None or data is None:
            return
        self._to_peer(allocation, data, peer)

    def _channel_data(self, data: bytes, client: Client) -> None:
        allocation = self.allocations.get(client.five_tuple)
        if allocation is None:
            return
        number, payload = stun.decode_channel_data(data)
        peer = allocation.channel_peer(number)
        if peer is not None:
            self._to_peer(allocation, payload, peer)

    def _to_peer(self, allocation: Allocation, payload: bytes, peer: tuple[str, int]) -> None:
        if not allocation.permitted(peer[0]) or allocation.relay is None:
            return
        if peer[0] in allocation.relay_only and peer not in self.relay_addresses:
            return
        if not allocation.to_peer_bucket.take(len(payload)):
            return  # over the allocation's rate: dropped, as a congested UDP path would
        allocation.relay.sendto(payload, peer)
        allocation.bytes_to_peer += len(payload)

    def _from_peer(self, allocation: Allocation, payload: bytes, peer: tuple[str, int]) -> None:
        if not allocation.permitted(peer[0]) or not allocation.from_peer_bucket.take(len(payload)):
            return
        client = self._client_for(allocation)
        if client is None:
            return
        number = allocation.channel_of_peer.get(peer)
        if number is not None and allocation.channel_peer(number) == peer:
            frame = stun.encode_channel_data(number, payload, pad=client.stream)
        else:
            indication = Message(Method.DATA, Class.INDICATION, _transaction_id())
            indication.add("XOR-PEER-ADDRESS", peer).add("DATA", payload)
            frame = stun.encode(indication, fingerprint=False)
        client.send(frame)
        allocation.bytes_from_peer += len(payload)

    def _client_for(self, allocation: Allocation) -> Client | None:
        return self._clients.get(allocation.five_tuple)

    def register(self, client: Client) -> None:
        self._clients[client.five_tuple] = client

    def unregister(self, five_tuple: FiveTuple) -> None:
        self._clients.pop(five_tuple, None)


# Bursts from many clients arrive faster than one event loop drains them; the kernel's
# default buffers (about 200 KiB) would drop them.
SOCKET_BUFFER = 16 * 1024 * 1024
# Linux's option numbers (the socket module does not name them).
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33


def _large_buffers(sock) -> None:
    for option, forced in ((socket.SO_RCVBUF, SO_RCVBUFFORCE), (socket.SO_SNDBUF, SO_SNDBUFFORCE)):
        try:
            # Past net.core.rmem_max where the process may (CAP_NET_ADMIN), else up to it.
            sock.setsockopt(socket.SOL_SOCKET, forced, SOCKET_BUFFER)
        except OSError:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)


def _check_allocate_request(message: Message) -> None:
    """Refuse an Allocate asking for what the relay does not offer (UDP over IPv4 only)."""
    transport = message.get("REQUESTED-TRANSPORT")
    if transport is None:
        raise Reply(400)
    if transport != UDP:
        raise Reply(442)
    if message.get("REQUESTED-ADDRESS-FAMILY", 0x01) != 0x01:
        raise Reply(440)
    if message.get("RESERVATION-TOKEN") is not None and message.get("EVEN-PORT") is not None:
        raise Reply(400)  # RFC 8656 §7.2: not both


def _lifetime(requested: int | None) -> int:
    if requested is None:
        return DEFAULT_LIFETIME
    return max(DEFAULT_LIFETIME, min(requested, MAX_LIFETIME))


def _transaction_id() -> bytes:
    return random.randbytes(12)


def _local_address_towards(five_tuple: FiveTuple) -> str:
    """Our address on the route to the client: where peers of a relay will find it too."""
    host = five_tuple.server[0]
    if host not in ("0.0.0.0", "::", ""):
        return host
    family = socket.AF_INET6 if ":" in five_tuple.client[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect(five_tuple.client)
        return probe.getsockname()[0]


class _UdpListener(asyncio.DatagramProtocol):
    def __init__(self, server: TurnServer):
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.local = transport.get_extra_info("sockname")[:2]

    def datagram_received(self, data: bytes, addr) -> None:
        client_addr = (addr[0], addr[1])
        five_tuple = FiveTuple("udp", client_addr, self.local)
        client = self.server._clients.get(five_tuple)
        if client is None:
            client = Client(five_tuple, lambda payload, a=client_addr: self.transport.sendto(payload, a))
            self.server.register(client)
        self.server.packet(data, client)
        if five_tuple not in self.server.allocations:
            # Only clients with an allocation need a remembered sender.
            self.server.unregister(five_tuple)

    def error_received(self, exc: Exception) -> None:
        pass


class _TcpConnection(asyncio.Protocol):
    def __init__(self, server: TurnServer):
        self.server = server
        self.buffer = bytearray()

    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        self.five_tuple = FiveTuple("tcp", (peer[0], peer[1]), (local[0], local[1]))
        self.client = Client(self.five_tuple, transport.write)
        self.server.register(self.client)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            try:
                length = stun.stream_frame_length(bytes(self.buffer[:4]))
            except StunError:
                self.transport.close()  # not STUN or ChannelData: nothing sensible can follow
                return
            if stun.is_channel_data(bytes(self.buffer[:4])) and self.five_tuple not in self.server.allocations:
                # ChannelData before any allocation cannot be TURN (an HTTP "GET " looks like it).
                self.transport.close()
                return
            if length is None or len(self.buffer) < length:
                if length is not None and length > MAX_TCP_FRAME:
                    self.transport.close()
                return
            frame = bytes(self.buffer[:length])
            del self.buffer[:length]
            self.server.packet(frame, self.client)

    def connection_lost(self, exc) -> None:
        self.server.unregister(self.five_tuple)
        self.server.connection_lost(self.five_tuple)
