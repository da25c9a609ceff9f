"""Redis pub/sub for the edges and the scheduler: an outbox that publishes in batches, and a
subscription loop.

The outbox writes whatever queued meanwhile as one write of PUBLISH commands, each channel's
envelopes in one Redis message (an array of them: envelopes.py), in order (Redis delivers one
connection's publishes to a subscriber in the order they were made). It writes on a connection of
its own that asked Redis not to reply (CLIENT REPLY OFF): waiting for each batch's replies cost a
publisher a round trip, two system calls and redis-py's pipeline about 90 µs of CPU a batch, and a
message per envelope cost each subscriber redis-py's parsing of one more message.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable

import redis.asyncio as redis

from appliance.cluster.envelopes import encode
from appliance.web.ops import CHECK_SECONDS

log = logging.getLogger(__name__)

# The largest batch one write carries: bounds the memory of a burst, not its order.
BATCH = 1024


def connect(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, health_check_interval=10, socket_keepalive=True)


def answers(client: redis.Redis) -> Callable[[], Awaitable[str | None]]:
    """A readiness check (web/ops.py): None while Redis answers a PING, else why not."""

    async def check() -> str | None:
        try:
            await asyncio.wait_for(client.ping(), CHECK_SECONDS)
        except TimeoutError:
            return f"Redis did not answer within {CHECK_SECONDS} s"
        except (redis.RedisError, OSError) as exc:
            return f"Redis did not answer: {exc}"
        return None

    return check


class Outbox:
    """Publishes envelopes in order, batched; a batch that could not be written is logged and dropped
    (the pages' pings and the engine's own timeouts recover what it carried), and the next one
    connects again. Pub/sub tells a publisher nothing a reply would: it is lossy anyway."""

    def __init__(self, client: redis.Redis):
        self.connection = client.connection_pool.make_connection()
        self.connection.register_connect_callback(self._replies_off)  # at each (re)connection
        # A deque and a future, not an asyncio.Queue: one reader, and put costs an append.
        self.queue: collections.deque[tuple[str, object, bool]] = collections.deque()
        self.waiting: asyncio.Future | None = None  # the sender, waiting for something to send
        self.task: asyncio.Task | None = None

    async def _replies_off(self, connection) -> None:
        await connection.send_command("CLIENT", "REPLY", "OFF", check_health=False)

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._send())

    def put(self, channel: str, envelope: object, alone: bool = False) -> None:
        """``alone``: published in a message of its own, after everything put before it and before
        everything put after it, whatever their channels (other envelopes keep their order only
        within their channel)."""
        self.queue.append((channel, envelope, alone))
        if (waiting := self.waiting) is not None and not waiting.done():
            waiting.set_result(None)

    async def _send(self) -> None:
        connection, queue, loop = self.connection, self.queue, asyncio.get_running_loop()
        while True:
            while not queue:
                self.waiting = loop.create_future()
                try:
                    await self.waiting
                finally:
                    self.waiting = None
            # One turn of the event loop first: what the tasks and sockets ready now put joins this
            # write (a frame's reply, a round's task-assigns, the frames that came meanwhile) instead
            # of going in the next, each write a system call here and a Redis message to parse at
            # every subscriber.
            await asyncio.sleep(0)
            batch = [queue.popleft() for _ in range(min(len(queue), BATCH))]
            commands = b"".join(publish(channel, encode(envelopes)) for channel, envelopes in messages(batch))
            try:
                # No health check: its PING would wait for a reply that never comes.
                await connection.send_packed_command(commands, check_health=False)
            except (redis.RedisError, OSError) as exc:
                log.warning("could not pass %d message(s) on through Redis: %s", len(batch), exc)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.connection.disconnect()


def publish(channel: str, payload: bytes) -> bytes:
    """PUBLISH in Redis's protocol (RESP), as redis-py's pack_command writes it, at a tenth of its cost."""
    name = channel.encode()
    return b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (len(name), name, len(payload), payload)


def messages(batch: list[tuple[str, object, bool]]) -> list[tuple[str, list]]:
    """A batch's Redis messages: each channel's envelopes together, where the first of them was put,
    except that none joins a message across one put ``alone``."""
    found: list[tuple[str, list]] = []
    joinable: dict[str, list] = {}
    for channel, envelope, alone in batch:
        if alone:
            joinable = {}
        if (envelopes := joinable.get(channel)) is None:
            envelopes = joinable[channel] = []
            found.append((channel, envelopes))
        envelopes.append(envelope)
        if alone:
            joinable = {}
    return found


async def listen(client: redis.Redis, channels: list[str], handle: Callable[[str, bytes], Awaitable[None]]) -> None:
    """Hand every message on ``channels`` to ``handle`` until cancelled; resubscribe after Redis
    comes back (messages published meanwhile are lost, as pub/sub loses them)."""
    while True:
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(*channels)
            connection = pubsub.connection
            while True:
                # The connection's own reader, not PubSub.listen's: its health check, retry wrapper,
                # per-message timing and message dict cost more than the message (an edge's frames).
                # A broken connection raises here, and the loop subscribes again.
                response = await connection.read_response()
                if isinstance(response, list) and len(response) == 3 and response[0] == b"message":
                    await handle(response[1].decode(), response[2])
        except (redis.RedisError, OSError) as exc:
            log.warning("Redis subscription to %s broke (%s); subscribing again", ", ".join(channels), exc)
            await asyncio.sleep(1)
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()
