"""`/ws/worker`: one browser tab's connection, from hello to goodbye.

A misbehaving browser only ever harms its own connection: a message that does
not decode gets an error reply, an oversized one or too many bad ones close
the socket, and a worker that stops answering pings is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import msgspec
from litestar import WebSocket, websocket
from litestar.exceptions import WebSocketDisconnect

from appliance.accounts.auth import WORKER_BROWSER, access, client_address
from appliance.audit import service as audit
from appliance.background import BackgroundTasks
from appliance.events import (
    BlobsDropped,
    CandidatesAnnounced,
    TaskMessage,
    TransferFinished,
    WorkerJoined,
    WorkerLeft,
)
from appliance.fleet import protocol as p
from appliance.fleet.candidates import sdp_addresses, signal_addresses
from appliance.fleet.probe import Place, probe
from appliance.fleet.registry import BUSY_PING_SECONDS, PING_SECONDS, Fleet, Worker
from appliance.fleet.transfers import Transfer

log = logging.getLogger(__name__)

MAX_ERRORS = 10
HELLO_TIMEOUT = 30

CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_GONE = 4000  # sent away by an admin
CLOSE_DUPLICATE = 4001
CLOSE_SILENT = 4002
# The same page connected again (through another edge, or before this socket's end was seen).
CLOSE_REPLACED = 4004
# How long a hello waits for the connection it replaces to leave the fleet.
REPLACE_SECONDS = 5.0
# The session it was opened with ended (token or link revoked, account disabled, role or password
# changed, signed out): the page says why and does not reconnect with that cookie.
CLOSE_SESSION_ENDED = 4003


def same_origin(socket: WebSocket) -> bool:
    """Browsers always send Origin on WebSockets; refuse pages of other sites riding on our cookies."""
    origin = socket.headers.get("origin")
    if origin is None:
        return True  # not a browser (the command-line worker runner drives a browser, so it sends one)
    host = socket.headers.get("host", "")
    return urlsplit(origin).netloc == host


class Session:
    def __init__(self, socket: WebSocket, fleet: Fleet, ice_servers):
        self.socket = socket
        self.fleet = fleet
        self.ice_servers = ice_servers
        self.principal = socket.user
        self.worker: Worker | None = None
        self.errors = 0
        self.ping_id = 0
        self.ping_sent: dict[int, float] = {}
        # When the oldest ping sent since the worker last said anything went out (None: none is due).
        self.unanswered_since: float | None = None
        self.receiver: asyncio.Task | None = None  # the task reading the socket (run())
        # Why it was taken for gone (it stopped answering pings, or its page connected again): the
        # close code and reason it ends with.
        self.dropped: tuple[int, str] | None = None
        self.lock = asyncio.Lock()
        self.next_id = 0
        self.answers: dict[int, asyncio.Future[str]] = {}
        self.background = BackgroundTasks("worker connection")  # pings and the connectivity probe
        self.probe_place: Place | None = None  # in the fleet's line for a probe, until it runs

    @staticmethod
    def _encoded(message: object) -> tuple[str | bytes, str]:
        if isinstance(message, p.Frame):
            return p.encode_frame(message), "binary"
        return p.encoder.encode(message).decode(), "text"

    async def send(self, message: object) -> None:
        data, mode = self._encoded(message)
        async with self.lock:
            await self.socket.send_data(data, mode=mode)

    def send_now(self, message: object) -> bool:
        """Worker.send_now, on a socket with ``send_now`` (cluster/remote_sockets.RemoteSocket): the
        engine's messages go out without a task each."""
        if self.lock.locked():  # a send is under way: this one goes after it
            self.background.spawn(self.send(message))
            return True
        data, mode = self._encoded(message)
        return self.socket.send_now(data, mode)

    async def close(self, code: int, reason: str) -> None:
        with contextlib.suppress(Exception):
            await self.socket.close(code=code, reason=reason[:120])

    async def refuse(self, code: str, message: str, reply_to: int | None = None) -> None:
        self.errors += 1
        await self.send(p.Error(code=code, message=message, reply_to=reply_to))
        if self.errors >= MAX_ERRORS:
            await self.close(CLOSE_POLICY, "too many malformed messages")
            raise WebSocketDisconnect(detail="too many errors")

    async def end(self, reason: str) -> None:
        """Its session ended: close, and leave the fleet at once rather than when the socket has gone."""
        await self.close(CLOSE_SESSION_ENDED, reason)
        if self.worker is not None:
            self.fleet.remove(self.worker)
            await audit.note(
                "worker.disconnected",
                f"worker {self.worker.worker_id} of {self.worker.account_email}",
                {"state": self.worker.state},
                {"reason": reason},
            )

    async def run(self) -> None:
        opened = self.fleet.connections.setdefault(self.principal.credential_hash, set())
        opened.add(self)
        self.receiver = asyncio.current_task()
        try:
            await self._read()
        except (TimeoutError, WebSocketDisconnect):
            pass
        except asyncio.CancelledError:
            if self.dropped is None:
                raise
            self.receiver.uncancel()  # drop() stopped the reading: the worker leaves now
        finally:
            opened.discard(self)
            if not opened:
                self.fleet.connections.pop(self.principal.credential_hash, None)
            if self.probe_place is not None:
                self.probe_place.give_up()
            await self.background.cancel()
            if self.worker is not None:
                await self._leave(self.worker)
            if self.dropped is not None:
                await self.close(*self.dropped)

    def drop(self, code: int, reason: str) -> None:
        """Take the worker for gone now: it leaves the fleet, and its socket is closed with ``code``."""
        self.dropped = (code, reason)
        if self.receiver is not None:
            self.receiver.cancel()

    async def _read(self) -> None:
        while True:
            if self.worker is None:
                async with asyncio.timeout(HELLO_TIMEOUT):  # no task of its own, as wait_for makes
                    event = await self.socket.receive()
            else:
                event = await self.socket.receive()
            if event["type"] == "websocket.disconnect":
                return
            raw = event.get("text")
            if raw is None:
                await self.binary(event.get("bytes") or b"")
                continue
            if len(raw) > p.MAX_MESSAGE_BYTES:
                await self.send(
                    p.Error(code="too-large", message=f"messages are limited to {p.MAX_MESSAGE_BYTES} bytes")
                )
                await self.close(CLOSE_TOO_BIG, "message too large")
                return
            try:
                message = p.decode_message(raw)
            except msgspec.DecodeError as exc:
                await self.refuse("malformed", f"not a valid message: {exc}")
                continue
            await self.handle(message)

    def take_now(self, text: str) -> bool:
        """A task message handled as it arrives, without a turn of the session's task, as _read and
        handle would handle it: for a socket behind an edge (cluster/remote_sockets.RemoteSocket.deliver)
        whose session waits for a frame with none queued, once its worker said hello, when every
        subscriber of TaskMessage is a plain function. False: it goes through the session's inbox."""
        if self.worker is None or len(text) > p.MAX_MESSAGE_BYTES or not self.fleet.events.at_once(TaskMessage):
            return False
        try:
            message = p.decode_message(text)
        except msgspec.DecodeError:
            return False  # refused by _read
        if type(message) not in _TASK_TYPES:
            return False
        self.worker.last_seen = time.monotonic()
        if isinstance(message, p.TaskDone):
            self.worker.tasks_done += 1
        self.fleet.events.publish_now(TaskMessage(self.worker, message))
        return True

    async def _leave(self, worker: Worker) -> None:
        """The worker leaves the fleet: its links close, its transfers fail, the engine hears of it."""
        self.fleet.remove(worker)
        events = self.fleet.events
        for link in self.fleet.transfers.close_links(worker_id=worker.worker_id):
            await events.publish(TransferFinished(link, True))
        for transfer in self.fleet.transfers.involving(worker.worker_id):
            self.fleet.transfers.finish(transfer, False, "a worker left")
            await events.publish(TransferFinished(transfer, False, "a worker left"))
        await events.publish(WorkerLeft(worker))
        log.info("worker %s of %s left", worker.worker_id, worker.account_email)

    async def binary(self, data: bytes) -> None:
        """A binary frame: a parameter-server value under its JSON header (docs/protocol.md)."""
        try:
            header, payload = p.decode_frame(data)
        except (ValueError, msgspec.DecodeError) as exc:
            await self.refuse("malformed", f"not a valid binary frame: {exc}")
            return
        if self.worker is None:
            await self.refuse("not-ready", "send hello first", header.id)
            return
        if len(payload) > p.MAX_VALUE_BYTES:
            await self.refuse("too-large", f"values are limited to {p.MAX_VALUE_BYTES} bytes", header.id)
            return
        self.worker.last_seen = time.monotonic()
        await self.fleet.events.publish(TaskMessage(self.worker, p.Frame(header=header, payload=payload)))

    async def handle(self, message: p.Incoming) -> None:
        if isinstance(message, p.Hello):
            await self.hello(message)
            return
        if self.worker is None:
            await self.refuse("not-ready", "send hello first", getattr(message, "id", None))
            return
        self.worker.last_seen = time.monotonic()
        handler = _HANDLERS.get(type(message))
        if handler is not None:
            await handler(self, message)

    async def _pong(self, message: p.Pong) -> None:
        sent = self.ping_sent.pop(message.id, None)
        if sent is not None:
            self.worker.rtt_ms = (time.monotonic() - sent) * 1000
        self.worker.store_wait_ms = message.store_wait_ms

    async def _visibility(self, message: p.Visibility) -> None:
        self.worker.capabilities.visibility = message.state

    async def _stored(self, message: p.Stored) -> None:
        self.worker.stored_blobs, self.worker.stored_bytes = message.blobs, message.bytes

    async def _conditions(self, message: p.Conditions) -> None:
        caps = self.worker.capabilities
        caps.capacity, caps.power, caps.pressure = message.capacity, message.power, message.pressure

    async def _probe_answer(self, message: p.ProbeAnswer) -> None:
        waiter = self.answers.pop(message.reply_to, None)
        if waiter and not waiter.done():
            await self.announce(sdp_addresses(message.sdp))
            waiter.set_result(message.sdp)

    async def _blob_result(self, message: p.BlobStored | p.BlobFailed) -> None:
        if message.transfer_id is not None:
            await self.transfer_result(message)
        else:
            self.worker.resolve(message.reply_to, message)

    async def _blob_uploaded(self, message: p.BlobUploaded) -> None:
        self.worker.resolve(message.reply_to, message)

    async def _transfer_bytes(self, message: p.TransferBytes) -> None:
        self.fleet.transfers.report(message.transfer_id, self.worker.worker_id, message.bytes)

    async def _task_message(self, message) -> None:
        if isinstance(message, p.TaskDone):
            self.worker.tasks_done += 1
        await self.fleet.events.publish(TaskMessage(self.worker, message))

    async def _blobs_dropped(self, message: p.BlobsDropped) -> None:
        await self.fleet.events.publish(BlobsDropped(self.worker, message.sha256))

    async def _pause_or_resume(self, message: p.Pause | p.Resume) -> None:
        self.worker.paused = isinstance(message, p.Pause)
        self.worker.pause_reason = message.reason if isinstance(message, p.Pause) else ""
        await self.send(p.State(state=self.worker.state, reply_to=message.id))

    async def relay_signal(self, message: p.Signal) -> None:
        """Only between the two ends of a transfer or link the appliance arranged."""
        pairing = self.fleet.transfers.pairing(message.transfer_id)
        peer_id = pairing.peer_of(self.worker.worker_id) if pairing else None
        peer = self.fleet.get(peer_id) if peer_id else None
        if peer is None:
            await self.refuse("not-allowed", "no such transfer for this worker")
            return
        if isinstance(pairing, Transfer):
            pairing.moved()  # setting up its connection: the copy is under way
        # Before the peer hears of them: its relay permission to them must find them.
        await self.announce(signal_addresses(message.data))
        await peer.send(p.SignalOut(transfer_id=message.transfer_id, data=message.data))

    async def announce(self, addresses: list[str]) -> None:
        """The worker's own candidates' addresses, the peers the TURN relay may reach (turn/announced.py)."""
        if addresses:
            await self.fleet.events.publish(CandidatesAnnounced(self.worker, tuple(addresses)))

    async def transfer_result(self, message: p.BlobStored | p.BlobFailed) -> None:
        transfer = self.fleet.transfers.get(message.transfer_id)
        if transfer is None or transfer.peer_of(self.worker.worker_id) is None:
            return
        if isinstance(message, p.BlobStored):
            # Only the receiving end can say the blob arrived (it verified the SHA-256).
            if self.worker.worker_id != transfer.target or message.sha256 != transfer.sha256:
                return
            self.fleet.transfers.finish(transfer, True)
        else:
            self.fleet.transfers.finish(transfer, False, message.reason)
        ok, reason = transfer.done.result()
        await self.fleet.events.publish(TransferFinished(transfer, ok, reason))

    async def hello(self, message: p.Hello) -> None:
        if self.worker is not None:
            await self.refuse("already-hello", "this connection has already said hello", message.id)
            return
        worker = Worker(
            worker_id=message.worker_id,
            account_id=self.principal.user_id,
            account_email=self.principal.email,
            capabilities=message.capabilities,
            client=client_address(self.socket),
            send=self.send,
            close=self.close,
            send_now=self.send_now if hasattr(self.socket, "send_now") else None,
            blobs=len(message.blobs),
            instance=message.instance,
        )
        if not self.fleet.add(worker) and not await self._replace(worker):
            await self.send(
                p.Error(code="duplicate-worker", message="another tab uses this worker id", reply_to=message.id)
            )
            await self.close(CLOSE_DUPLICATE, "duplicate worker id")
            raise WebSocketDisconnect(detail="duplicate")
        self.worker = worker
        log.info("worker %s of %s joined from %s", worker.worker_id, worker.account_email, worker.client)
        await self.send(
            p.Welcome(
                reply_to=message.id,
                worker_id=worker.worker_id,
                account=worker.account_email,
                ping_seconds=PING_SECONDS,
                ice_servers=self.ice_servers(self.principal.user_id),
            )
        )
        await self.fleet.events.publish(WorkerJoined(worker, message.blobs, tuple(message.tasks)))
        # Pinged from now on: its hello says it lives, so the first ping comes a period later (a fleet
        # saying hello to a new leader at once does not answer a ping each a second after).
        self.background.paced(self._until_next_ping, self._ping)
        # After the welcome, so the page has its ICE servers before the offer arrives. It waits its
        # turn as a place in the fleet's line, not as a task of its own (a whole fleet waits there).
        self.probe_place = self.fleet.probe_turns.take(self._start_probe)

    async def _replace(self, worker: Worker) -> bool:
        """A hello from the page (same account and page load) another connection of the fleet still
        serves: that connection is dead, since a page holds one socket at a time. It leaves first,
        as a disconnect, so the engine takes the page back as a reconnect."""
        held = self.fleet.get(worker.worker_id)
        same_page = held is not None and held.instance and held.instance == worker.instance
        if not same_page or held.account_id != worker.account_id:
            return False
        old = next((s for group in self.fleet.connections.values() for s in group if s.worker is held), None)
        if old is None or old.receiver is None:
            return False
        log.info("worker %s connected again: its earlier connection is dropped", worker.worker_id)
        old.drop(CLOSE_REPLACED, "the page connected again")
        await asyncio.wait({old.receiver}, timeout=REPLACE_SECONDS)
        return self.fleet.add(worker)

    async def _exchange(self, offer_sdp: str) -> str:
        self.next_id += 1
        answer = asyncio.get_running_loop().create_future()
        self.answers[self.next_id] = answer
        await self.send(p.ProbeOffer(id=self.next_id, sdp=offer_sdp))
        return await answer

    def _start_probe(self) -> None:
        """Its turn came: the probe runs, and hands the turn on however it ends (even cancelled
        before it started)."""
        self.probe_place = None
        self.background.spawn(self._probe()).add_done_callback(lambda _: self.fleet.probe_turns.done())

    async def _probe(self) -> None:
        connectivity, rtt = await probe(self._exchange)
        if self.worker is not None:
            self.worker.connectivity = connectivity
            self.worker.probe_rtt_ms = rtt
            log.info("worker %s: %s%s", self.worker.worker_id, connectivity, f", {rtt:.1f} ms" if rtt else "")

    async def _until_next_ping(self) -> None:
        """A worker serving a run is pinged every BUSY_PING_SECONDS; any other every PING_SECONDS, or
        as soon as it starts serving one."""
        worker = self.worker
        if worker.busy:
            await asyncio.sleep(BUSY_PING_SECONDS)
            return
        loop = asyncio.get_running_loop()
        worker.nudge = nudge = loop.create_future()
        timer = loop.call_later(PING_SECONDS, lambda: nudge.done() or nudge.set_result(None))
        try:
            await nudge
        finally:
            timer.cancel()
            worker.nudge = None

    async def _ping(self) -> None:
        worker = self.worker
        now = time.monotonic()
        if self.unanswered_since is not None and worker.last_seen >= self.unanswered_since:
            self.unanswered_since = None  # it said something since
        silent = now - self.unanswered_since if self.unanswered_since is not None else 0.0
        hung = worker.store_wait_ms / 1000
        if max(silent, hung) > worker.silence_limit():
            # Gone: a frozen browser keeps its socket open, and a page whose browser process hangs
            # still answers but its store does not. It leaves the fleet now (not once the socket's
            # close handshake would time out); a page that lives reconnects, and its tasks go on.
            what = f"no answer to pings for {silent:.1f} s" if silent >= hung else f"its store hung for {hung:.1f} s"
            log.info("worker %s: %s", worker.worker_id, what)
            self.drop(CLOSE_SILENT, "no answer to pings")
            return
        self.unanswered_since = self.unanswered_since or now
        self.ping_id += 1
        self.ping_sent = {k: v for k, v in self.ping_sent.items() if k > self.ping_id - 8}
        self.ping_sent[self.ping_id] = now
        with contextlib.suppress(Exception):
            await self.send(p.Ping(id=self.ping_id))


# What a worker's message does once it has said hello, by the message's type.
_HANDLERS: dict[type, Callable[[Session, Any], Awaitable[None]]] = {
    p.Pong: Session._pong,
    p.Visibility: Session._visibility,
    p.Stored: Session._stored,
    p.Conditions: Session._conditions,
    p.ProbeAnswer: Session._probe_answer,
    p.Signal: Session.relay_signal,
    p.BlobStored: Session._blob_result,
    p.BlobFailed: Session._blob_result,
    p.BlobUploaded: Session._blob_uploaded,
    p.TransferBytes: Session._transfer_bytes,
    p.BlobsDropped: Session._blobs_dropped,
    p.Pause: Session._pause_or_resume,
    p.Resume: Session._pause_or_resume,
    **dict.fromkeys(p.TASK_MESSAGES, Session._task_message),
}
_TASK_TYPES = frozenset(p.TASK_MESSAGES)


async def accept(socket: WebSocket) -> bool:
    """Accept a worker page's socket, or close one a page of another site opened (False)."""
    if not same_origin(socket):
        await socket.close(code=CLOSE_POLICY, reason="cross-site connection refused")
        return False
    await socket.accept()
    return True


@websocket("/ws/worker", opt=access(WORKER_BROWSER))
async def worker_socket(socket: WebSocket) -> None:
    if not await accept(socket):
        return
    await Session(socket, socket.app.state.fleet, socket.app.state.turn.ice_servers).run()


ROUTES = [worker_socket]
