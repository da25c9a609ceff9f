"""The embedded TURN server against Debian's coturn client tools as the independent peer.

``turnutils_uclient`` (coturn's TURN test client) allocates relays on our server with TURN REST
API credentials made from the shared secret, relays numbered messages to ``turnutils_peer``
(coturn's UDP echo server) and counts the echoes: over UDP with channels, over UDP with Send
indications and over TCP, with no message lost at a moderate rate. Its negative modes (random
channel numbers, corrupted messages) must leave the server serving.

Set ``PEERMR_TEST_TURN_SERVER=coturn`` to run the same tests against coturn's own ``turnserver``,
which shows the tests themselves are right::

    PEERMR_TEST_TURN_SERVER=coturn .venv/bin/python -m pytest tests/integration/test_turn_coturn_clients.py
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Callable

import httpx
import pytest

from tests.support import Appliance
from tests.turn_tools import (
    CoturnServer,
    TurnPeer,
    ensure_coturn_tools,
    free_port_range,
    free_udp_tcp_port,
    run_uclient,
    stun_binding,
    wait_for_stun,
)

SERVER = os.environ.get("PEERMR_TEST_TURN_SERVER", "appliance")
HOST = "127.0.0.1"
# The account part of the username: the appliance's first account, the admin it creates at start.
ACCOUNT = "1"
# A moderate rate: 4 sessions (2 clients, each an RTP and an RTCP session) x 100 messages of
# 500 bytes at uclient's default 20 ms interval, 200 messages/s in all. No loss even with the two
# cores of a CI machine kept busy.
LOAD = {"clients": 4, "messages": 100, "length": 500}
NEGATIVE_TIMEOUT = 20


@dataclasses.dataclass
class TurnTarget:
    name: str
    host: str
    port: int
    secret: str
    alive: Callable[[], bool]
    log: Callable[[], str]
    healthz: str | None = None  # the appliance's /healthz; coturn has none


@pytest.fixture(scope="module")
def peer():
    ensure_coturn_tools()
    echo = TurnPeer(HOST).start()
    yield echo
    echo.stop()


@pytest.fixture(scope="module")
def turn(tmp_path_factory, peer):
    """Our appliance's TURN server, or coturn's turnserver with PEERMR_TEST_TURN_SERVER=coturn."""
    secret = secrets.token_urlsafe(24)
    port = free_udp_tcp_port(HOST)
    low, high = free_port_range(200, HOST)
    if SERVER == "coturn":
        server = CoturnServer(secret, host=HOST, port=port, relay_ports=(low, high)).start()
        yield TurnTarget("coturn", HOST, port, secret, server.running, server.log)
        server.cleanup()
        return
    assert SERVER == "appliance", f"PEERMR_TEST_TURN_SERVER must be appliance or coturn, not {SERVER!r}"
    appliance = Appliance(
        tmp_path_factory.mktemp("turn") / "data",
        env={
            "PEERMR_TURN_PORT": str(port),
            "PEERMR_TURN_SECRET": secret,
            "PEERMR_TURN_ALLOWED_PEERS": f"{HOST}/32",
            "PEERMR_TURN_MIN_PORT": str(low),
            "PEERMR_TURN_MAX_PORT": str(high),
        },
    ).start()
    try:
        wait_for_stun(HOST, port, timeout=30)
        yield TurnTarget(
            "appliance",
            HOST,
            port,
            secret,
            lambda: appliance.proc is not None and appliance.proc.poll() is None,
            appliance.log,
            healthz=f"{appliance.url}/healthz",
        )
    finally:
        appliance.stop()


def relay(turn: TurnTarget, peer: TurnPeer, **options):
    return run_uclient(turn.host, turn.port, secret=turn.secret, user=ACCOUNT, peer_port=peer.port, **options)


def assert_serving(turn: TurnTarget, peer: TurnPeer) -> None:
    """The server is up, answers STUN on UDP and TCP, /healthz is 200, and relays without loss."""
    assert turn.alive(), f"{turn.name} TURN server died:\n{turn.log()[-6000:]}"
    for transport in ("udp", "tcp"):
        stun_binding(turn.host, turn.port, transport, timeout=5)
    if turn.healthz:
        assert httpx.get(turn.healthz, timeout=10).status_code == 200
    relay(turn, peer, **LOAD).assert_clean()


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param({}, id="udp-channels"),
        pytest.param({"send_indications": True}, id="udp-send-indications"),
        pytest.param({"tcp": True}, id="tcp-channels"),
        pytest.param({"tcp": True, "send_indications": True}, id="tcp-send-indications"),
    ],
)
def test_every_message_is_relayed(turn, peer, mode):
    result = relay(turn, peer, **LOAD, **mode)
    result.assert_clean()
    assert result.received_bytes == result.sent_bytes == result.expected * LOAD["length"]


def test_a_wrong_secret_gets_no_allocation(turn, peer):
    result = run_uclient(
        turn.host,
        turn.port,
        secret=turn.secret + "-wrong",
        user=ACCOUNT,
        peer_port=peer.port,
        clients=2,
        messages=5,
        timeout=30,
    )
    assert (result.timed_out or result.exit_code != 0) and not result.received, f"{result.describe()}\n{result.output}"
    assert_serving(turn, peer)


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param({"negative": True}, id="N-udp-channels"),
        pytest.param({"negative": True, "tcp": True}, id="N-tcp-channels"),
        pytest.param({"negative_protocol": True}, id="R-udp-channels"),
        pytest.param({"negative_protocol": True, "send_indications": True}, id="R-udp-send-indications"),
        pytest.param({"negative_protocol": True, "tcp": True}, id="R-tcp-channels"),
    ],
)
def test_negative_tests_leave_the_server_serving(turn, peer, mode):
    """uclient's -N binds random channel numbers, -R corrupts about one message in ten.

    Whatever uclient makes of the answers (it may give up, lose messages or wait for a response to
    a corrupted request until it is killed), the server must go on serving everyone.
    """
    relay(turn, peer, clients=2, messages=50, length=200, timeout=NEGATIVE_TIMEOUT, **mode)
    assert_serving(turn, peer)
