"""Two real Chromium pages open a data channel through the embedded TURN relay only."""

from __future__ import annotations

import time

import pytest

from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, Client

pytestmark = pytest.mark.e2e

SETUP = """async () => {
  const config = await (await fetch('/worker/ice-servers')).json();
  window.pc = new RTCPeerConnection({iceServers: config.iceServers, iceTransportPolicy: 'relay'});
  window.received = [];
  window.opened = new Promise(resolve => {
    const attach = ch => { window.channel = ch; ch.binaryType = 'arraybuffer';
      ch.onmessage = e => window.received.push(e.data.byteLength ?? e.data.length);
      if (ch.readyState === 'open') resolve(); else ch.onopen = () => resolve(); };
    window.pc.ondatachannel = e => attach(e.channel);
    window.attach = attach;
  });
  window.gathered = () => new Promise(resolve => {
    if (window.pc.iceGatheringState === 'complete') return resolve();
    window.pc.onicegatheringstatechange = () => window.pc.iceGatheringState === 'complete' && resolve();
  });
}"""

OFFER = """async () => {
  window.attach(window.pc.createDataChannel('relay-test'));
  await window.pc.setLocalDescription(await window.pc.createOffer());
  await window.gathered();
  return window.pc.localDescription.toJSON();
}"""

ANSWER = """async offer => {
  await window.pc.setRemoteDescription(offer);
  await window.pc.setLocalDescription(await window.pc.createAnswer());
  await window.gathered();
  return window.pc.localDescription.toJSON();
}"""

SEND = """async ([count, size]) => {
  await window.opened;
  for (let i = 0; i < count; i++) {
    while (window.channel.bufferedAmount > 1 << 20) await new Promise(r => setTimeout(r, 10));
    window.channel.send(new Uint8Array(size).fill(i % 256));
  }
}"""


def relay_candidates_only(sdp: str) -> bool:
    candidates = [line for line in sdp.splitlines() if line.startswith("a=candidate")]
    return bool(candidates) and all(" typ relay" in line for line in candidates)


def test_two_pages_exchange_data_through_the_relay_and_it_is_metered(chromium, appliance: Appliance):
    client = Client(appliance.url)
    client.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    context = chromium.new_context(bypass_csp=True)
    context.add_cookies([{"name": "peermr_session", "value": client.cookies["peermr_session"], "url": appliance.url}])
    a, b = context.new_page(), context.new_page()
    try:
        for page in (a, b):
            page.goto(f"{appliance.url}/ui")
            page.evaluate(SETUP)
        offer = a.evaluate(OFFER)
        assert relay_candidates_only(offer["sdp"]), offer["sdp"]
        answer = b.evaluate(ANSWER, offer)
        assert relay_candidates_only(answer["sdp"])
        a.evaluate("async answer => { await window.pc.setRemoteDescription(answer); await window.opened; }", answer)
        b.evaluate("() => window.opened")

        count, size = 200, 1000
        a.evaluate(SEND, [count, size])
        b.evaluate(SEND, [count, size])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got = (a.evaluate("window.received.length"), b.evaluate("window.received.length"))
            if got == (count, count):
                break
            time.sleep(0.2)
        assert got == (count, count)
        assert a.evaluate("window.pc.sctp.transport.iceTransport.getSelectedCandidatePair().local.type") == "relay"
        for page in (a, b):
            page.evaluate("window.pc.close()")
    finally:
        context.close()

    # Both browsers' allocations end when the connections close, each writing its own row (one may
    # come well after the other); the bytes are the admin's (account 1).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = appliance.query("select account, bytes_to_peer, bytes_from_peer from turn_relay_usage")
        mine = [r for r in rows if r[0] == "1"]
        relayed_out, relayed_in = sum(r[1] for r in mine), sum(r[2] for r in mine)
        if min(relayed_out, relayed_in) >= 2 * count * size:
            break
        time.sleep(1)
    # Each side's payload crossed two allocations (its own and the peer's), plus DTLS/SCTP overhead.
    assert relayed_out >= 2 * count * size and relayed_in >= 2 * count * size, mine
