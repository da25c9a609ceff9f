"""The active scheduler's side of the edges: each browser socket an edge holds becomes a session here.

fleet/connection.Session runs on a RemoteSocket exactly as on its own WebSocket: hello, pings,
signalling relays and task messages work unchanged, so the one-process appliance and a scheduler
behind edges share every line of the protocol. The scheduler also watches that each edge lives
(its Redis key): the sockets of an edge that died leave the fleet at once, so their pages, which
reconnect through another edge, are taken back without waiting out their pings.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import uuid
from dataclasses import dataclass

from appliance.background import BackgroundTasks
from appliance.cluster import envelopes as e
from appliance.cluster.installation import installation_id
from appliance.cluster.redis_link import Outbox, connect, listen
from appliance.events import CandidatesAnnounced, WorkerJoined, WorkerLeft
from appliance.fleet.connection import Session
from appliance.fleet.registry import Fleet

log = logging.getLogger(__name__)

# Frames of one socket waiting for its session: past this the browser floods faster than its
# session reads, and the socket is closed (a WebSocket of its own would push back instead).
INBOX_LIMIT = 4096
CLOSE_FLOODED = 1008
CLOSE_EDGE_LOST = 1012  # "service restart": if its edge lives after all, the page reconnects


@dataclass(frozen=True)
class Address:
    host: str
    port: int = 0


class RemoteSocket:
    """A browser's WebSocket held by an edge, with what fleet/connection.Session uses of a socket."""

    def __init__(self, link: EdgeLink, opened: e.Opened):
        self.link = link
        self.edge = opened.edge
        self.conn = opened.conn
        self.user = opened.principal
        self.client = Address(opened.client)
        self.headers: dict[str, str] = {}
        # Not an asyncio.Queue: one reader and no waiting writer need a deque and a future, where a
        # Queue is six objects for every socket of the fleet (and its put and get cost more).
        self.inbox: collections.deque[dict] = collections.deque()
        self.reader: asyncio.Future | None = None  # the session, waiting for a frame
        self.session: Session | None = None  # the session that reads it (EdgeLink._open)
        self.closed = False

    async def receive(self) -> dict:
        while not self.inbox:
            self.reader = asyncio.get_running_loop().create_future()
            try:
                await self.reader
            finally:
                self.reader = None
        return self.inbox.popleft()

    def _put(self, event: dict) -> None:
        self.inbox.append(event)
        if self.reader is not None and not self.reader.done():
            self.reader.set_result(None)

    async def send_data(self, data: str | bytes, mode: str = "text") -> None:
        if not self.send_now(data, mode):
            raise ConnectionError("the socket is closed")

    def send_now(self, data: str | bytes, mode: str = "text") -> bool:
        """What send_data does, which never waits: the frame is queued for the edge (False: closed)."""
        if self.closed:
            return False
        text, binary = (data, None) if mode == "text" else (None, data)
        self.link.send(self.edge, e.Frame(self.conn, text=text, data=binary, epoch=self.link.epoch))
        return True

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.close_now(code, reason)

    def close_now(self, code: int, reason: str) -> None:
        """Tell its edge to close it (a socket the session no longer reads must not stay open there)."""
        if not self.closed:
            self.link.send(self.edge, e.Closed(self.conn, code, reason, self.link.epoch))
        self.gone()

    def gone(self) -> None:
        """No more frames come: the session reads a disconnect next."""
        if self.closed:
            return
        self.closed = True
        self.link.sockets.pop(self.conn, None)
        self._put({"type": "websocket.disconnect", "code": 1006})  # even past INBOX_LIMIT: the last

    def deliver(self, frame: e.Frame) -> None:
        if len(self.inbox) >= INBOX_LIMIT:
            log.warning("worker socket %s sent more than its session could read; closing it", self.conn)
            self.close_now(CLOSE_FLOODED, "too many messages")
        elif frame.text is not None:
            # A task message its session takes at once when it waits with nothing queued (Session.take_now):
            # no future, no turn of its task, for most of the frames a run's workers send.
            idle = not self.inbox and self.reader is not None and not self.reader.done()
            if not (idle and self.session is not None and self.session.take_now(frame.text)):
                self._put({"type": "websocket.receive", "text": frame.text})
        else:
            self._put({"type": "websocket.receive", "bytes": frame.data or b""})


class EdgeLink:
    """Runs a session for every socket the edges pass on, while this scheduler leads."""

    def __init__(self, redis_url: str, fleet: Fleet, url: str):
        self.fleet = fleet
        self.url = url  # where edges pass dashboard and API requests
        self.epoch = uuid.uuid4().hex  # this leadership's: edges drop what an earlier leader sends
        self.sockets: dict[str, RemoteSocket] = {}
        self.downs: dict[str, str] = {}  # edge -> its down channel
        self.client = connect(redis_url)  # connects when first used
        self.channels: e.Channels | None = None  # the installation's, read from the database at start
        self.outbox: Outbox | None = None
        self.background = BackgroundTasks("edge link")
        self.sessions = BackgroundTasks("edge sessions")

    async def start(self) -> None:
        self.channels = e.Channels(await installation_id())
        self.outbox = Outbox(self.client)
        self.outbox.start()
        self.background.spawn(listen(self.client, [self.channels.up], self._up))
        self.background.every(e.EDGE_RENEW_SECONDS, self._drop_dead_edges)
        # After subscribing: at this announcement the edges tell us of their sockets again.
        await asyncio.sleep(0.1)
        await self._renew_announcement()
        await self.client.publish(self.channels.leader, e.encode(e.Leader(self.epoch, self.url)))
        self.background.every(e.LEADER_RENEW_SECONDS, self._renew_announcement)
        log.info("leading the edges (epoch %s)", self.epoch[:8])

    async def stop(self) -> None:
        await self.background.cancel()
        await self.sessions.cancel()
        if self.outbox is not None:
            await self.outbox.stop()
        with contextlib.suppress(Exception):
            await self.client.aclose()

    async def _renew_announcement(self) -> None:
        """An edge that starts later reads whom it serves; it lapses with a leader that died."""
        announcement = e.encode(e.Leader(self.epoch, self.url))
        await self.client.set(self.channels.leader_key, announcement, px=int(e.LEADER_TTL_SECONDS * 1000))

    def send(self, edge: str, message: e.Down) -> None:
        if (channel := self.downs.get(edge)) is None:  # its name made once, not at every frame
            channel = self.downs[edge] = self.channels.down(edge)
        self.outbox.put(channel, message)

    # The fleet's events, for the edges' TURN relays (what turn.TurnService does in one process). An
    # announcement goes alone: a page may hear of a peer's addresses (a signal) only after the relays
    # may reach them. A worker's stay and leave keep their order on the turn channel, and may go
    # sooner than what was queued before them on others (a leave only starts its grace): they join,
    # so a fleet saying hello to a new leader is not one Redis message a hello for every edge.

    def candidates_announced(self, event: CandidatesAnnounced) -> None:
        self.outbox.put(
            self.channels.turn, e.TurnPeers("announce", event.worker.worker_id, event.addresses), alone=True
        )

    def worker_joined(self, event: WorkerJoined) -> None:
        self.outbox.put(self.channels.turn, e.TurnPeers("stay", event.worker.worker_id))

    def worker_left(self, event: WorkerLeft) -> None:
        self.outbox.put(self.channels.turn, e.TurnPeers("leave", event.worker.worker_id))

    async def _up(self, _channel: str, payload: bytes) -> None:
        try:
            messages = e.decode_up(payload)
        except Exception as exc:  # an edge of another version, or not an edge at all
            log.warning("dropped a message from an edge that did not decode: %s", exc)
            return
        for message in messages:
            if isinstance(message, e.Opened):
                self._open(message)
            elif (socket := self.sockets.get(message.conn)) is not None:
                if isinstance(message, e.Frame):
                    socket.deliver(message)
                else:
                    socket.gone()

    def _open(self, opened: e.Opened) -> None:
        socket = RemoteSocket(self, opened)
        self.sockets[opened.conn] = socket
        servers = opened.ice_servers
        socket.session = Session(socket, self.fleet, lambda _account: servers)
        self.sessions.spawn(socket.session.run())

    async def _drop_dead_edges(self) -> None:
        for edge in {socket.edge for socket in self.sockets.values()}:
            if await self.client.exists(self.channels.edge_key(edge)):
                continue
            dropped = [socket for socket in list(self.sockets.values()) if socket.edge == edge]
            log.warning("edge %s stopped renewing its key: its %d socket(s) leave", edge[:8], len(dropped))
            for socket in dropped:
                socket.close_now(CLOSE_EDGE_LOST, "its edge stopped renewing its key")
            self.downs.pop(edge, None)
