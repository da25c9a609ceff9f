"""The embedded TURN server: authentication errors, peer policy, limits, relaying and metering.

aioice's TURN client (an independent implementation) relays to a UDP echo peer;
the error cases use a small raw client built on our codec, whose correctness the
RFC 5769 vectors establish (tests/unit/test_stun_codec.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import time

import aioice.turn
import pytest

from appliance.turn import stun
from appliance.turn.credentials import make_username, password_for
from appliance.turn.stun import Class, Message, Method
from tests.support import ADMIN_EMAIL, Appliance, Client

REALM = "peermr"


def secret_of(appliance: Appliance) -> str:
    return json.loads((appliance.data_dir / "secrets.json").read_text())["turn_secret"]


def turn_port(appliance: Appliance) -> int:
    return int(appliance.env["PEERMR_TURN_PORT"])


class RawClient:
    """A UDP STUN/TURN client speaking through our codec, one request at a time."""

    def __init__(self, appliance: Appliance):
        self.server = ("127.0.0.1", turn_port(appliance))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.settimeout(5)
        self.sock.bind(("127.0.0.1", 0))

    def close(self) -> None:
        self.sock.close()

    def request(self, message: Message, key: bytes | None = None) -> Message:
        self.sock.sendto(stun.encode(message, integrity_key=key), self.server)
        while True:
            data, _ = self.sock.recvfrom(65535)
            response = stun.decode(data)
            if response.transaction_id == message.transaction_id:
                return response

    def challenge(self) -> tuple[str, str]:
        response = self.request(Message(Method.ALLOCATE, Class.REQUEST, os.urandom(12)).add("REQUESTED-TRANSPORT", 17))
        assert response.get("ERROR-CODE")[0] == 401
        return response.get("REALM"), response.get("NONCE")

    def authed(self, method: Method, username: str, password: str, nonce: str, *attributes) -> Message:
        message = Message(method, Class.REQUEST, os.urandom(12))
        for name, value in attributes:
            message.add(name, value)
        message.add("USERNAME", username).add("REALM", REALM).add("NONCE", nonce)
        return self.request(message, stun.long_term_key(username, REALM, password))


def error_code(response: Message) -> int | None:
    value = response.get("ERROR-CODE")
    return value[0] if value else None


@pytest.fixture
def raw(appliance):
    client = RawClient(appliance)
    yield client
    client.close()


def credentials(appliance: Appliance, account: int = 1, ttl: int = 600) -> tuple[str, str]:
    username = make_username(account, None, ttl)
    return username, password_for(secret_of(appliance), username)


def test_binding_returns_the_mapped_address(raw: RawClient):
    response = raw.request(Message(Method.BINDING, Class.REQUEST, os.urandom(12)))
    assert response.msg_class == Class.SUCCESS
    assert response.get("XOR-MAPPED-ADDRESS") == raw.sock.getsockname()


def test_authentication_errors(appliance: Appliance, raw: RawClient):
    realm, nonce = raw.challenge()  # no credentials: 401 with a realm and a nonce
    assert realm == REALM and nonce
    username, password = credentials(appliance)
    wrong = raw.authed(Method.ALLOCATE, username, "not-the-password", nonce, ("REQUESTED-TRANSPORT", 17))
    assert error_code(wrong) == 401
    expired = make_username(1, None, ttl=-60)
    late = raw.authed(
        Method.ALLOCATE, expired, password_for(secret_of(appliance), expired), nonce, ("REQUESTED-TRANSPORT", 17)
    )
    assert error_code(late) == 401
    forged = raw.authed(Method.ALLOCATE, username, password, "not-a-nonce-we-issued", ("REQUESTED-TRANSPORT", 17))
    assert error_code(forged) == 438 and forged.get("NONCE")
    tcp = raw.authed(Method.ALLOCATE, username, password, nonce, ("REQUESTED-TRANSPORT", 6))
    assert error_code(tcp) == 442
    missing = raw.authed(Method.ALLOCATE, username, password, nonce)
    assert error_code(missing) == 400
    not_allocated = raw.authed(Method.REFRESH, username, password, nonce, ("LIFETIME", 600))
    assert error_code(not_allocated) == 437


def test_unknown_comprehension_required_attribute_gets_420(appliance: Appliance, raw: RawClient):
    message = Message(Method.ALLOCATE, Class.REQUEST, os.urandom(12)).add("REQUESTED-TRANSPORT", 17)
    data = bytearray(stun.encode(message, fingerprint=False))
    data += (0x7F01).to_bytes(2, "big") + (4).to_bytes(2, "big") + b"abcd"
    data[2:4] = (len(data) - 20).to_bytes(2, "big")
    raw.sock.sendto(bytes(data), raw.server)
    response = stun.decode(raw.sock.recvfrom(65535)[0])
    assert error_code(response) == 420 and response.get("UNKNOWN-ATTRIBUTES") == [0x7F01]


def test_allocation_lifecycle_and_default_peer_policy(appliance: Appliance, raw: RawClient, admin: Client):
    _, nonce = raw.challenge()
    username, password = credentials(appliance)
    allocated = raw.authed(Method.ALLOCATE, username, password, nonce, ("REQUESTED-TRANSPORT", 17), ("LIFETIME", 30))
    assert allocated.msg_class == Class.SUCCESS
    assert allocated.get("LIFETIME") == 600  # below the default is raised to it
    relay_host, relay_port = allocated.get("XOR-RELAYED-ADDRESS")
    assert relay_host == "127.0.0.1" and 49152 <= relay_port <= 65535
    again = raw.authed(Method.ALLOCATE, username, password, nonce, ("REQUESTED-TRANSPORT", 17))
    assert error_code(again) == 437
    other_user, other_password = credentials(appliance, account=2)
    stolen = raw.authed(Method.REFRESH, other_user, other_password, nonce, ("LIFETIME", 600))
    assert error_code(stolen) == 441
    # By default only addresses connected workers announced are relayed to (tests/security/test_turn_permissions.py).
    for host in ("127.0.0.1", "169.254.1.1", "224.0.0.1", "0.0.0.0", "192.0.2.10"):
        refused = raw.authed(Method.CREATE_PERMISSION, username, password, nonce, ("XOR-PEER-ADDRESS", (host, 5000)))
        assert error_code(refused) == 403, host
    # The admin allows a network on the Settings page.
    assert admin.form("/ui/admin/settings", {"allowed": "192.0.2.0/24", "denied": ""}).status_code == 303
    try:
        ok = raw.authed(Method.CREATE_PERMISSION, username, password, nonce, ("XOR-PEER-ADDRESS", ("192.0.2.10", 5000)))
    finally:
        assert admin.form("/ui/admin/settings", {"allowed": "", "denied": ""}).status_code == 303
    assert ok.msg_class == Class.SUCCESS
    assert stun.check_integrity(
        stun.encode(ok, stun.long_term_key(username, REALM, password)), stun.long_term_key(username, REALM, password)
    )
    bad_channel = raw.authed(
        Method.CHANNEL_BIND,
        username,
        password,
        nonce,
        ("CHANNEL-NUMBER", 0x3000),
        ("XOR-PEER-ADDRESS", ("192.0.2.10", 5000)),
    )
    assert error_code(bad_channel) == 400
    longer = raw.authed(Method.REFRESH, username, password, nonce, ("LIFETIME", 99999))
    assert longer.get("LIFETIME") == 3600
    deleted = raw.authed(Method.REFRESH, username, password, nonce, ("LIFETIME", 0))
    assert deleted.msg_class == Class.SUCCESS
    gone = raw.authed(Method.CREATE_PERMISSION, username, password, nonce, ("XOR-PEER-ADDRESS", ("192.0.2.10", 5000)))
    assert error_code(gone) == 437


def test_malformed_input_leaves_the_server_serving(appliance: Appliance, raw: RawClient):
    header = stun.encode(Message(Method.ALLOCATE, Class.REQUEST, os.urandom(12)))
    for junk in (
        b"",
        b"\x00",
        b"\x00\x01\x00",
        header[:19],
        header[:20] + b"\xff" * 7,
        os.urandom(300),
        b"\x40\x00\xff\xff",
        b"\x00\x03\x00\x08" + header[4:20] + b"\x00\x19\x00\x10abcd",
    ):
        raw.sock.sendto(junk, raw.server)
    with socket.create_connection(raw.server, timeout=5) as tcp:
        tcp.sendall(b"GET / HTTP/1.1\r\n\r\n")
        tcp.settimeout(5)
        assert tcp.recv(100) == b""  # not STUN: the connection is closed
    response = raw.request(Message(Method.BINDING, Class.REQUEST, os.urandom(12)))
    assert response.msg_class == Class.SUCCESS


def test_stale_nonce_gets_438(tmp_path):
    server = Appliance(tmp_path / "data", env={"PEERMR_TURN_NONCE_SECONDS": "1"}).start()
    client = RawClient(server)
    try:
        _, nonce = client.challenge()
        time.sleep(1.5)
        username, password = credentials(server)
        stale = client.authed(Method.ALLOCATE, username, password, nonce, ("REQUESTED-TRANSPORT", 17))
        assert error_code(stale) == 438
        fresh = client.authed(Method.ALLOCATE, username, password, stale.get("NONCE"), ("REQUESTED-TRANSPORT", 17))
        assert fresh.msg_class == Class.SUCCESS
    finally:
        client.close()
        server.stop()


def test_allocation_quota_and_bandwidth_cap(tmp_path):
    server = Appliance(
        tmp_path / "data",
        env={
            "PEERMR_TURN_MAX_ALLOCATIONS_PER_ACCOUNT": "2",
            "PEERMR_TURN_BANDWIDTH_PER_ALLOCATION": "20000",
            "PEERMR_TURN_ALLOWED_PEERS": "127.0.0.1/32",
        },
    ).start()
    clients = [RawClient(server) for _ in range(4)]
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    sink.settimeout(0.5)
    try:
        username, password = credentials(server, account=7)
        results = []
        for client in clients[:3]:
            _, nonce = client.challenge()
            results.append(client.authed(Method.ALLOCATE, username, password, nonce, ("REQUESTED-TRANSPORT", 17)))
        assert [error_code(r) for r in results] == [None, None, 486]
        other, other_password = credentials(server, account=8)
        _, nonce = clients[3].challenge()
        unaffected = clients[3].authed(Method.ALLOCATE, other, other_password, nonce, ("REQUESTED-TRANSPORT", 17))
        assert unaffected.msg_class == Class.SUCCESS

        # Send 200 KB in a burst through a 20 KB/s allocation: most of it is dropped.
        first = clients[0]
        _, nonce = first.challenge()
        peer = sink.getsockname()
        assert (
            first.authed(Method.CREATE_PERMISSION, username, password, nonce, ("XOR-PEER-ADDRESS", peer)).msg_class
            == Class.SUCCESS
        )
        for _ in range(200):
            indication = Message(Method.SEND, Class.INDICATION, os.urandom(12))
            indication.add("XOR-PEER-ADDRESS", peer).add("DATA", b"x" * 1000)
            first.sock.sendto(stun.encode(indication), first.server)
        received = 0
        try:
            while True:
                received += len(sink.recv(65535))
        except TimeoutError:
            pass
        assert 0 < received <= 45_000
    finally:
        for client in clients:
            client.close()
        sink.close()
        server.stop()


class Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.transport.sendto(data, addr)


class Collector(asyncio.DatagramProtocol):
    def __init__(self):
        self.received: asyncio.Queue = asyncio.Queue()

    def datagram_received(self, data, addr):
        self.received.put_nowait((data, addr))


@pytest.mark.parametrize("transport", ["udp", "tcp"])
async def test_aioice_client_relays_to_an_echo_peer_and_bytes_are_metered(appliance: Appliance, transport: str):
    admin = Client(appliance.url)
    admin.login(ADMIN_EMAIL, "admin-password-for-tests")
    # The admin allows loopback peers on the Settings page (the default refuses them).
    assert admin.form("/ui/admin/settings", {"allowed": "127.0.0.1/32", "denied": ""}).status_code == 303
    account_id = 1
    loop = asyncio.get_running_loop()
    echo, _ = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
    peer = echo.get_extra_info("sockname")
    username, password = credentials(appliance, account=account_id)
    relay, collector = await aioice.turn.create_turn_endpoint(
        Collector, ("127.0.0.1", turn_port(appliance)), username, password, transport=transport
    )
    try:
        payloads = [os.urandom(500) for _ in range(20)]
        for payload in payloads:
            relay.sendto(payload, peer)
            data, addr = await asyncio.wait_for(collector.received.get(), 10)
            assert data == payload and addr == peer
    finally:
        relay.close()
        echo.close()
    await asyncio.sleep(0.5)  # the Refresh(0) that closes the allocation, then the meter's write

    # Back to the default policy for the tests that follow.
    assert admin.form("/ui/admin/settings", {"allowed": "", "denied": ""}).status_code == 303

    relayed = 20 * 500
    rows = appliance.query("select account, bytes_to_peer, bytes_from_peer, ended_at from turn_relay_usage")
    mine = [r for r in rows if r[0] == str(account_id) and r[3] is not None and r[1] == relayed]
    assert mine and mine[-1][2] == relayed
    page = admin.get("/ui/admin/turn").text
    assert re.search(rf"<td>{re.escape(ADMIN_EMAIL)}</td><td>[\d.]+ KiB</td>", page)
    metrics = admin.get("/metrics").text
    assert re.search(r'peermr_turn_relayed_bytes_total\{direction="to_peer"\} [1-9]', metrics)


def test_relayed_browsers_reach_each_others_relay_ports_and_nothing_else_there(appliance: Appliance):
    """Two clients of this server may talk relay-to-relay although the relay addresses are the appliance's own."""
    first, second = RawClient(appliance), RawClient(appliance)
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    sink.settimeout(0.5)
    try:
        relays, nonces = [], []
        for index, client in enumerate((first, second)):
            _, nonce = client.challenge()
            username, password = credentials(appliance, account=20 + index)
            allocated = client.authed(Method.ALLOCATE, username, password, nonce, ("REQUESTED-TRANSPORT", 17))
            relays.append(allocated.get("XOR-RELAYED-ADDRESS"))
            nonces.append((username, password, nonce))
        username, password, nonce = nonces[0]
        ok = first.authed(Method.CREATE_PERMISSION, username, password, nonce, ("XOR-PEER-ADDRESS", relays[1]))
        assert ok.msg_class == Class.SUCCESS
        other_service = first.authed(
            Method.CREATE_PERMISSION, username, password, nonce, ("XOR-PEER-ADDRESS", sink.getsockname())
        )
        assert error_code(other_service) == 403
        # The permission covers the relay's IP, but another port on it stays out of reach.
        indication = Message(Method.SEND, Class.INDICATION, os.urandom(12))
        indication.add("XOR-PEER-ADDRESS", sink.getsockname()).add("DATA", b"should not arrive")
        first.sock.sendto(stun.encode(indication), first.server)
        with pytest.raises(TimeoutError):
            sink.recv(100)
        # Second permits first; then data flows relay to relay as a Data indication.
        username2, password2, nonce2 = nonces[1]
        second.authed(Method.CREATE_PERMISSION, username2, password2, nonce2, ("XOR-PEER-ADDRESS", relays[0]))
        indication = Message(Method.SEND, Class.INDICATION, os.urandom(12))
        indication.add("XOR-PEER-ADDRESS", relays[1]).add("DATA", b"hello relay")
        first.sock.sendto(stun.encode(indication), first.server)
        data = stun.decode(second.sock.recvfrom(65535)[0])
        assert data.method == Method.DATA and data.get("DATA") == b"hello relay"
        assert data.get("XOR-PEER-ADDRESS") == relays[0]
    finally:
        for s in (first, second):
            s.close()
        sink.close()


def test_browsers_get_ice_servers_for_their_own_account(appliance: Appliance, admin: Client):
    answer = admin.get("/worker/ice-servers").json()
    stun_server, turn_server = answer["iceServers"]
    port = turn_port(appliance)
    assert stun_server == {"urls": [f"stun:127.0.0.1:{port}"]}
    assert turn_server["urls"] == [f"turn:127.0.0.1:{port}?transport=udp", f"turn:127.0.0.1:{port}?transport=tcp"]
    expiry, account = turn_server["username"].split(":")
    assert account == "1" and int(expiry) > time.time() + answer["ttl"] - 60
    assert turn_server["credential"] == password_for(secret_of(appliance), turn_server["username"])


def test_even_port_reservation_is_handed_to_the_second_allocation(appliance: Appliance):
    """RTP/RTCP-style pairs (coturn's uclient does this): EVEN-PORT with R reserves the next port."""
    first, second = RawClient(appliance), RawClient(appliance)
    try:
        username, password = credentials(appliance, account=30)
        _, nonce = first.challenge()
        rtp = first.authed(Method.ALLOCATE, username, password, nonce, ("REQUESTED-TRANSPORT", 17), ("EVEN-PORT", True))
        host, port = rtp.get("XOR-RELAYED-ADDRESS")
        token = rtp.get("RESERVATION-TOKEN")
        assert port % 2 == 0 and token and len(token) == 8
        _, nonce = second.challenge()
        rtcp = second.authed(
            Method.ALLOCATE, username, password, nonce, ("REQUESTED-TRANSPORT", 17), ("RESERVATION-TOKEN", token)
        )
        assert rtcp.get("XOR-RELAYED-ADDRESS") == (host, port + 1)
        third = RawClient(appliance)
        _, nonce = third.challenge()
        reused = third.authed(
            Method.ALLOCATE, username, password, nonce, ("REQUESTED-TRANSPORT", 17), ("RESERVATION-TOKEN", token)
        )
        assert error_code(reused) == 508  # a token is good once
        third.close()
    finally:
        first.close()
        second.close()
