"""Raw RTCDataChannels between worker pages, signaled through Playwright: the benchmarks' reference.

The same bytes, in 64 KiB messages with the same backpressure as PMRFS and peer links, between
the same browsers as the figure they are compared with, in the same run. A page may hold several
raw connections, each under a name (window.raws[name]), at the sending and the receiving end.
"""

from __future__ import annotations

import time

SETUP = """([name, size]) => {
  const raw = (window.raws ||= {})[name] = {pc: new RTCPeerConnection(), candidates: [], size};
  raw.pc.onicecandidate = e => e.candidate && raw.candidates.push(e.candidate.toJSON());
  raw.received = new Promise(resolve => {
    raw.pc.ondatachannel = ({channel}) => {
      let n = 0;
      channel.onmessage = e => { n += e.data.byteLength; if (n >= raw.size) resolve(); };
    };
  });
}"""
OFFER = """async name => {
  const raw = window.raws[name];
  raw.channel = raw.pc.createDataChannel('raw', {ordered: true});
  raw.channel.binaryType = 'arraybuffer';
  raw.open = new Promise(r => raw.channel.onopen = r);
  await raw.pc.setLocalDescription(await raw.pc.createOffer());
  await new Promise(r => setTimeout(r, 500));
  return {sdp: raw.pc.localDescription.toJSON(), candidates: raw.candidates};
}"""
ANSWER = """async ([name, {sdp, candidates}]) => {
  const raw = window.raws[name];
  await raw.pc.setRemoteDescription(sdp);
  for (const c of candidates) await raw.pc.addIceCandidate(c);
  await raw.pc.setLocalDescription(await raw.pc.createAnswer());
  await new Promise(r => setTimeout(r, 500));
  return {sdp: raw.pc.localDescription.toJSON(), candidates: raw.candidates};
}"""
CONNECT = """async ([name, {sdp, candidates}]) => {
  const raw = window.raws[name];
  await raw.pc.setRemoteDescription(sdp);
  for (const c of candidates) await raw.pc.addIceCandidate(c);
  await raw.open;
}"""
# Starts sending and returns at once (several pages send at the same time); RECEIVED waits.
START_SEND = """([name, chunk]) => {
  const raw = window.raws[name];
  const data = new Uint8Array(chunk);
  raw.channel.bufferedAmountLowThreshold = 2 << 20;
  raw.sent = (async () => {
    for (let sent = 0; sent < raw.size; sent += chunk) {
      if (raw.channel.bufferedAmount > 4 << 20) await new Promise(r => raw.channel.onbufferedamountlow = r);
      raw.channel.send(data);
    }
  })();
}"""
RECEIVED = "name => window.raws[name].received"


def connect(a_page, b_page, name: str, size: int) -> None:
    """A raw connection from ``a_page`` to ``b_page`` that will carry ``size`` bytes."""
    for page in (a_page, b_page):
        page.evaluate(SETUP, [name, size])
    answer = b_page.evaluate(ANSWER, [name, a_page.evaluate(OFFER, name)])
    a_page.evaluate(CONNECT, [name, answer])


def raw_channel_seconds(a_page, b_page, size: int, chunk: int = 64 * 1024) -> float:
    """Seconds to move ``size`` bytes from ``a_page`` to ``b_page`` over a new raw data channel."""
    connect(a_page, b_page, "pair", size)
    started = time.monotonic()
    a_page.evaluate(START_SEND, ["pair", chunk])
    b_page.evaluate(RECEIVED, "pair")
    return time.monotonic() - started


def raw_ring_seconds(pages: list, size: int, chunk: int = 64 * 1024) -> float:
    """Seconds for every page to send ``size`` bytes to the next one at once (a ring's traffic)."""
    names = [f"ring-{i}" for i in range(len(pages))]
    for i, name in enumerate(names):
        connect(pages[i], pages[(i + 1) % len(pages)], name, size)
    started = time.monotonic()
    for i, name in enumerate(names):
        pages[i].evaluate(START_SEND, [name, chunk])
    for i, name in enumerate(names):
        pages[(i + 1) % len(pages)].evaluate(RECEIVED, name)
    return time.monotonic() - started
