"""The TURN relay reaches the browsers of the fleet, not the organisation's network behind it.

Every worker browser holds TURN credentials; a relay that reached any private address would be
a way into the internal network for whoever holds them. A permission (CreatePermission, and the
one a ChannelBind implies) is granted only for an address a connected worker announced as one
of its ICE candidates in signalling it sent through the appliance, or one an admin allowed;
anything else gets 403 Forbidden. coturn's ``turnutils_uclient`` is the attacker's client.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time

import pytest

from appliance.turn import stun
from appliance.turn.stun import Class, Message, Method
from tests.integration.test_job_scheduling import Api, job_script, token_for
from tests.integration.test_metrics_access import scrape, value
from tests.integration.test_turn import RawClient, credentials, error_code, secret_of, turn_port
from tests.sim_workers import SimWorker, cookie_of, linked_maps, start_workers
from tests.support import ADMIN_EMAIL, Appliance
from tests.turn_tools import TurnPeer, UclientResult, ensure_coturn_tools, run_uclient, wait_for_stun

HOST = "127.0.0.1"
GRACE = 2  # seconds a disconnected worker's addresses stay reachable
# Documentation addresses (RFC 5737) stand for a worker's candidates: nothing answers there.
CANDIDATE, SRFLX = "203.0.113.40", "203.0.113.41"


@pytest.fixture(scope="module")
def appliance(appliance_with):
    server = appliance_with(turn_peer_grace_seconds=GRACE)
    wait_for_stun(HOST, turn_port(server))
    return server


@pytest.fixture(scope="module")
def echo():
    ensure_coturn_tools()
    with TurnPeer(HOST) as peer:
        yield peer


@pytest.fixture
def raw(appliance):
    client = RawClient(appliance)
    yield client
    client.close()


def relay(appliance: Appliance, peer_host: str, peer_port: int = 9, **mode) -> UclientResult:
    """One uclient session relaying three messages to the peer, as account 1 (the admin)."""
    return run_uclient(
        HOST,
        turn_port(appliance),
        secret=secret_of(appliance),
        user="1",
        peer_host=peer_host,
        peer_port=peer_port,
        clients=1,
        messages=3,
        rtcp=False,
        timeout=60,
        **mode,
    )


# uclient binds a channel to the peer by default; with Send indications it creates a permission.
MODES = [pytest.param({}, id="channel-bind"), pytest.param({"send_indications": True}, id="create-permission")]


def assert_forbidden(result: UclientResult) -> None:
    assert result.exit_code != 0 and not result.sent, result.describe()
    assert "error 403 (Forbidden)" in result.output, result.output[-2000:]


def create_permission(raw: RawClient, appliance: Appliance, peer: tuple[str, int]) -> Message:
    """Allocate (once per client) and ask for a permission to ``peer``."""
    username, password = credentials(appliance)
    _, nonce = raw.challenge()
    raw.authed(Method.ALLOCATE, username, password, nonce, ("REQUESTED-TRANSPORT", 17))
    return raw.authed(Method.CREATE_PERMISSION, username, password, nonce, ("XOR-PEER-ADDRESS", peer))


def refused_count(appliance: Appliance, reason: str) -> float:
    return value(scrape(appliance).text, "peermr_turn_permissions_refused_total", reason=reason)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("peer", ["10.1.2.3", "192.168.20.7"])
def test_a_relay_to_an_address_no_worker_announced_is_refused(appliance, mode, peer):
    before = refused_count(appliance, "unannounced")
    assert_forbidden(relay(appliance, peer, **mode))
    assert refused_count(appliance, "unannounced") > before
    assert f"TURN refused account 1 a permission to {peer}: not a candidate of any connected worker" in appliance.log()


def test_the_refusal_is_the_rfc_403_and_a_send_indication_opens_nothing(appliance, raw):
    refused = create_permission(raw, appliance, ("10.1.2.3", 80))
    assert refused.msg_class == Class.ERROR and refused.get("ERROR-CODE") == (403, "Forbidden")
    # Without a permission a Send indication is dropped (RFC 8656 §11.3), wherever it points.
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind((HOST, 0))
    sink.settimeout(1)
    try:
        indication = Message(Method.SEND, Class.INDICATION, os.urandom(12))
        indication.add("XOR-PEER-ADDRESS", sink.getsockname()).add("DATA", b"knock knock")
        raw.sock.sendto(stun.encode(indication), raw.server)
        with pytest.raises(TimeoutError):
            sink.recv(100)
    finally:
        sink.close()


async def announce_in_signalling(appliance: Appliance, admin, candidates: list[dict]) -> list[SimWorker]:
    """Run a two-worker job whose rank 0 links to rank 1 and signals ``candidates`` (the data of
    `signal` messages) over the link; returns the still connected workers once rank 1 received them."""
    api = Api(appliance, token_for(appliance, ADMIN_EMAIL))
    delivered = asyncio.Event()

    async def signal(link: dict, workers: dict[int, SimWorker]) -> None:
        for data in candidates:
            await workers[0].send({"type": "signal", "transferId": link["linkId"], "data": data})
        while sum(m["type"] == "signal" for m in workers[1].messages) < len(candidates):
            await asyncio.sleep(0.05)
        delivered.set()

    workers = await start_workers(appliance.url, cookie_of(admin), 2, on_task=linked_maps(signal, delivered))
    run = api.run(api.job(job_script(workers=2)))
    await asyncio.wait_for(delivered.wait(), 30)
    assert (await api.wait(run["id"]))["state"] == "succeeded"
    return workers


def candidate(address: str) -> str:
    return f"candidate:1 1 udp 2122260223 {address} 50000 typ host generation 0"


async def test_an_address_a_connected_worker_announced_in_its_signalling_is_relayed_to(appliance, admin):
    assert_forbidden(relay(appliance, CANDIDATE))
    offer = (
        "v=0\r\nm=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\n"
        f"a=candidate:2 1 udp 1686052607 {SRFLX} 50001 typ srflx raddr 0.0.0.0 rport 0\r\n"
    )
    workers = await announce_in_signalling(
        appliance,
        admin,
        [
            {"candidate": {"candidate": candidate(CANDIDATE), "sdpMid": "0", "sdpMLineIndex": 0}},
            {"sdp": {"type": "offer", "sdp": offer}},
            # A worker cannot open the appliance's own loopback by announcing it.
            {"candidate": {"candidate": candidate(HOST), "sdpMid": "0", "sdpMLineIndex": 0}},
        ],
    )
    try:
        relayed = await asyncio.to_thread(relay, appliance, CANDIDATE)
        assert relayed.sent == relayed.expected and "403" not in relayed.output, relayed.describe()
        assert await relayed_bytes_recorded(appliance, 3 * 200)  # the relay did send the messages on
        assert not forbidden(appliance, SRFLX)
        assert forbidden(appliance, HOST)
        # The deny list wins over what workers announce.
        assert admin.form("/ui/admin/settings", {"allowed": "", "denied": "203.0.113.0/24"}).status_code == 303
        before = refused_count(appliance, "denied")
        assert forbidden(appliance, SRFLX)
        assert refused_count(appliance, "denied") == before + 1
        assert admin.form("/ui/admin/settings", {"allowed": "", "denied": ""}).status_code == 303
    finally:
        for worker in workers:
            await worker.close()
    # Workers' addresses outlive them by a grace (a tab that reconnects at once); then they are forgotten.
    await asyncio.sleep(0.5)
    assert not forbidden(appliance, SRFLX)
    await asyncio.sleep(GRACE + 1)
    assert forbidden(appliance, SRFLX) and forbidden(appliance, CANDIDATE)


async def relayed_bytes_recorded(appliance: Appliance, size: int) -> bool:
    """An allocation of account 1 ended having sent ``size`` bytes to its peer (the meter writes it then)."""
    for _ in range(50):
        rows = appliance.query(
            "select bytes_to_peer from turn_relay_usage where account = '1' and ended_at is not null"
        )
        if any(row[0] == size for row in rows):
            return True
        await asyncio.sleep(0.1)
    return False


def forbidden(appliance: Appliance, address: str) -> bool:
    """A fresh allocation's permission to ``address`` gets 403."""
    raw = RawClient(appliance)
    try:
        return error_code(create_permission(raw, appliance, (address, 50001))) == 403
    finally:
        raw.close()


async def test_the_candidates_of_a_workers_answer_to_the_appliance_probe_are_announced(appliance, admin):
    # A worker that claims a whole network keeps only its 32 most recent addresses.
    addresses = [f"198.51.100.{n}" for n in range(1, 41)]
    assert forbidden(appliance, addresses[-1])
    answered = asyncio.Event()

    async def answer(worker: SimWorker, offer: dict) -> None:
        lines = "".join(f"a=candidate:{n} 1 udp 2122260223 {a} 50000 typ host\r\n" for n, a in enumerate(addresses))
        await worker.send({"type": "probe-answer", "replyTo": offer["id"], "sdp": "v=0\r\n" + lines})
        answered.set()

    worker = await SimWorker(appliance.url, cookie_of(admin), on_probe_offer=answer).start()
    try:
        await asyncio.wait_for(answered.wait(), 30)
        deadline = time.monotonic() + 5
        while forbidden(appliance, addresses[-1]) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not forbidden(appliance, addresses[-1])
        assert not forbidden(appliance, addresses[-32])
        assert forbidden(appliance, addresses[0]) and forbidden(appliance, addresses[-33])
    finally:
        await worker.close()


@pytest.mark.parametrize("mode", MODES)
def test_an_admin_allowed_network_is_relayed_to_and_the_settings_page_says_the_default(appliance, admin, echo, mode):
    page = admin.get("/ui/admin/settings").text
    assert "only to the addresses connected workers announced" in page
    assert_forbidden(relay(appliance, HOST, echo.port, **mode))  # loopback: nobody may announce it
    assert admin.form("/ui/admin/settings", {"allowed": f"{HOST}/32", "denied": ""}).status_code == 303
    try:
        relay(appliance, HOST, echo.port, **mode).assert_clean()
        # The deny list wins over the allow list.
        assert admin.form("/ui/admin/settings", {"allowed": f"{HOST}/32", "denied": "127.0.0.0/8"}).status_code == 303
        assert_forbidden(relay(appliance, HOST, echo.port, **mode))
    finally:
        assert admin.form("/ui/admin/settings", {"allowed": "", "denied": ""}).status_code == 303
