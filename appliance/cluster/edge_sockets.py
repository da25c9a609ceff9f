"""An edge's browser sockets, passed to and from the active scheduler over Redis (envelopes.py).

The edge authenticates each socket (its cookie, against the shared database), then only carries
frames: the scheduler runs the protocol. When another scheduler becomes the leader, the edge tells
it of every socket again and asks each page to say hello again on the same socket (`hello-again`):
the new leader takes the pages back as after a restart, adopting the runs from their checkpoints,
without thousands of new connections at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import types
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field

import msgspec
from litestar import WebSocket
from litestar.types import Send

from appliance.accounts.auth import client_address
from appliance.background import BackgroundTasks
from appliance.cluster import envelopes as e
from appliance.cluster.installation import installation_id
from appliance.cluster.redis_link import Outbox, connect, listen
from appliance.fleet import protocol as p
from appliance.turn.service import TurnService

log = logging.getLogger(__name__)

CLOSE_SCHEDULER_CHANGED = 1012  # "service restart": the page reconnects
# A page asked to say hello again that has not within this long is closed (it reconnects instead).
HELLO_AGAIN_SECONDS = 10.0
HELLO_AGAIN = p.encoder.encode(p.HelloAgain()).decode()


# Where edge_app.EdgeApp puts the server's own ASGI receive and send of a worker socket.
RAW_ASGI = "peermr.raw_asgi"


class MessageType(msgspec.Struct):
    type: str = ""


read_type = msgspec.json.Decoder(MessageType).decode


@dataclass
class Held:
    socket: WebSocket
    opened: e.Opened  # told again to each new leader
    epoch: str  # the leader it was opened under, or last said hello to ("" when none led)
    send: Send  # the server's ASGI send, for its frames
    pending: collections.deque = field(default_factory=collections.deque)
    writer: asyncio.Task | None = None
    # Asked to say hello again: what it sends before its hello is dropped, since the new leader
    # would refuse it (the page sends its task reports again after the welcome).
    awaiting_hello: bool = False

    def says_hello(self, text: str | None) -> bool:
        try:
            return text is not None and read_type(text).type == "hello"
        except msgspec.DecodeError:
            return False


class EdgeSockets:
    def __init__(self, redis_url: str, turn: TurnService):
        self.turn = turn
        self.edge = uuid.uuid4().hex
        self.held: dict[str, Held] = {}
        self.leader: e.Leader | None = None
        self.client = connect(redis_url)  # connects when first used
        self.channels: e.Channels | None = None  # the installation's, read from the database at start
        self.outbox: Outbox | None = None
        self.background = BackgroundTasks("edge")

    @property
    def epoch(self) -> str:
        return self.leader.epoch if self.leader else ""

    async def start(self) -> None:
        self.channels = e.Channels(await installation_id())
        await self._renew()
        if (record := await self.client.get(self.channels.leader_key)) is not None:
            self.leader = e.decode_leader(record)
        self.outbox = Outbox(self.client)
        self.outbox.start()
        channels = [self.channels.down(self.edge), self.channels.leader, self.channels.turn]
        self.background.spawn(listen(self.client, channels, self._message))
        self.background.every(e.EDGE_RENEW_SECONDS, self._renew)
        log.info("edge %s: %s", self.edge[:8], f"leader {self.leader.url}" if self.leader else "no leader yet")

    async def stop(self) -> None:
        await self.background.cancel()
        for held in list(self.held.values()):
            await self._close(held, CLOSE_SCHEDULER_CHANGED, "the edge is stopping")
        if self.outbox is not None:
            await self.outbox.stop()
        with contextlib.suppress(Exception):
            await self.client.delete(self.channels.edge_key(self.edge))
            await self.client.aclose()

    async def _renew(self) -> None:
        await self.client.set(self.channels.edge_key(self.edge), b"1", px=int(e.EDGE_TTL_SECONDS * 1000))

    def _up(self, message: e.Up) -> None:
        self.outbox.put(self.channels.up, message)

    async def serve(self, socket: WebSocket) -> None:
        """Carry one browser's socket until it closes."""
        conn = uuid.uuid4().hex
        principal = socket.user
        ice_servers = self.turn.ice_servers(principal.user_id)
        # Its frames through the server's own receive and send where the app passed them (RAW_ASGI):
        # the socket's own wrap each in two more calls that only track a state read by nobody here.
        receive, send = socket.scope.get(RAW_ASGI) or (socket.receive, socket.send)
        opened = e.Opened(self.edge, conn, principal, client_address(socket), ice_servers)
        held = self.held[conn] = Held(socket, opened, self.epoch, send)
        self._up(held.opened)
        try:
            while True:
                event = await receive()
                if event["type"] == "websocket.disconnect":
                    return
                text = event.get("text")
                if held.awaiting_hello:
                    if not held.says_hello(text):
                        continue
                    held.awaiting_hello = False
                self._up(e.Frame(conn, text=text, data=None if text is not None else event.get("bytes") or b""))
        finally:
            self.held.pop(conn, None)
            self._up(e.Closed(conn))

    async def _message(self, channel: str, payload: bytes) -> None:
        try:
            if channel == self.channels.leader:
                self._new_leader(e.decode_leader(payload))
            elif channel == self.channels.turn:
                for peers in e.decode_turn(payload):
                    self._turn_peers(peers)
            else:
                for message in e.decode_down(payload):
                    self._down(message)
        except Exception as exc:  # one bad message must not end the subscription
            log.warning("edge: dropped a message on %s: %s", channel, exc)

    def _down(self, message: e.Down) -> None:
        held = self.held.get(message.conn)
        if held is None or message.epoch != self.epoch:
            return  # gone already, or from a scheduler that no longer leads
        self._queue(held, message)

    def _queue(self, held: Held, message: e.Down) -> None:
        if held.writer is None and isinstance(message, e.Frame):
            # Sent at once, without a task: the server's send waits only while the browser's socket
            # is backed up, and then a writer goes on with it (the frames after it wait behind it).
            if (waiting := _until_it_waits(held.send(_send_event(message)))) is not None:
                held.writer = asyncio.get_running_loop().create_task(self._write(held, waiting))
            return
        held.pending.append(message)
        if held.writer is None:
            held.writer = asyncio.get_running_loop().create_task(self._write(held))

    async def _write(self, held: Held, started: tuple[Coroutine, object] | None = None) -> None:
        """One socket's frames in order, without holding up the others' behind a slow browser
        (``started``: a send that waits, to finish first)."""
        try:
            if started is not None:
                with contextlib.suppress(Exception):
                    await _go_on(*started)
            while held.pending:
                message = held.pending.popleft()
                if isinstance(message, e.Closed):
                    await self._close(held, message.code, message.reason)
                    return
                with contextlib.suppress(Exception):
                    await held.send(_send_event(message))
        finally:
            held.writer = None

    async def _close(self, held: Held, code: int, reason: str) -> None:
        held.pending.clear()
        with contextlib.suppress(Exception):
            await held.socket.close(code=code, reason=reason[:120])

    def _new_leader(self, leader: e.Leader) -> None:
        if self.leader is not None and leader.epoch == self.leader.epoch:
            return
        self.leader = leader
        stale = [held for held in self.held.values() if held.epoch != leader.epoch]
        log.info("edge %s: new leader %s; %d page(s) say hello to it", self.edge[:8], leader.url, len(stale))
        for held in stale:
            self._hello_again(held, leader.epoch)
        asyncio.get_running_loop().call_later(HELLO_AGAIN_SECONDS, self._hellos_overdue, stale, leader.epoch)

    def _hello_again(self, held: Held, epoch: str) -> None:
        """The socket stays open: the new leader hears it opened, then the page's hello on it (no new
        connection, authentication or reconnect backoff for thousands of pages at once)."""
        held.epoch, held.awaiting_hello = epoch, True
        held.pending.clear()  # what the old leader still had to send
        self._up(held.opened)
        self._queue(held, e.Frame(held.opened.conn, text=HELLO_AGAIN, epoch=epoch))

    def _hellos_overdue(self, asked: list[Held], epoch: str) -> None:
        """A page that did not say hello again (one of an older version) reconnects instead."""
        for held in asked:
            if held.awaiting_hello and held.epoch == epoch and held.opened.conn in self.held:
                self.background.spawn(self._close(held, CLOSE_SCHEDULER_CHANGED, "the scheduler changed"))

    def _turn_peers(self, message: e.TurnPeers) -> None:
        announced = self.turn.announced
        if message.kind == "announce":
            announced.announce(message.worker_id, message.addresses)
        elif message.kind == "stay":
            announced.stay(message.worker_id)
        else:
            announced.leave(message.worker_id)


def _send_event(frame: e.Frame) -> dict:
    if frame.text is not None:
        return {"type": "websocket.send", "text": frame.text}
    return {"type": "websocket.send", "bytes": frame.data or b""}


def _until_it_waits(coro: Coroutine) -> tuple[Coroutine, object] | None:
    """Run a coroutine until it first waits: None when it finished then (an error of a socket that
    closed is dropped, as _write drops it), else the coroutine and what it waits for (_go_on)."""
    try:
        waiting = coro.send(None)
    except StopIteration:
        return None
    except Exception:
        return None
    return coro, waiting


@types.coroutine
def _go_on(coro: Coroutine, waiting: object):
    """Await the rest of a coroutine that _until_it_waits ran until it waited for ``waiting``."""
    while True:
        try:
            try:
                sent = yield waiting
            except BaseException as exc:  # a cancel, or the future's error: the coroutine handles it
                waiting = coro.throw(exc)
            else:
                waiting = coro.send(sent)
        except StopIteration as done:
            return done.value
