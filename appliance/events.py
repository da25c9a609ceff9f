"""How the domains hear of each other: typed events and the one hub they go through.

The fleet, the jobs coordinator and account sessions publish; the coordinator, the fleet, PMRFS
datanodes, billing meters and worker reliability subscribe. Who listens to what is wired once, in
``app.create_app`` (docs/architecture.md, "Events" has the map). An event is a frozen value;
subscribing to anything that is not one of the event types below is an error when the app is
built, so a misspelt event cannot go unheard.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from appliance.fleet.registry import Worker
    from appliance.fleet.transfers import Link, Transfer
    from appliance.jobs.execution import AttemptRecord

log = logging.getLogger(__name__)


class EndCause(enum.StrEnum):
    """Why a run ended, for whoever must tell causes apart (reliability, billing, the dashboard)."""

    COMPLETED = "completed"
    CANCELLED = "cancelled"  # by its coordinator
    JOB_ERROR = "job-error"  # the job's code threw (or refused a lost peer it could not recover from)
    STAGE_TIMEOUT = "stage-timeout"  # a stage ran past the timeout the job gave it
    WORKER_LOST = "worker-lost"  # a rank lost its worker and no eligible worker became free in time
    TRANSFER_FAILED = "transfer-failed"  # inputs could not be moved between workers
    OUTPUT_LOST = "output-lost"  # the final output could not be kept
    NO_STORAGE = "no-storage"  # an s3 run of an account without Cloud Data settings
    QUEUE_TIMEOUT = "queue-timeout"  # it did not start within its queue timeout
    VALIDATION_FAILED = "validation-failed"  # a validated task's attempts never agreed on its output
    APPLIANCE_RESTART = "appliance-restart"
    ENGINE_ERROR = "engine-error"  # a step of the engine broke an invariant (only with engine_checks)

    @property
    def jobs_doing(self) -> bool:
        """The run ended by the job's own doing (or its coordinator's), not its workers'."""
        # Attempts that never agree are most likely job code that is not deterministic.
        return self in (EndCause.CANCELLED, EndCause.JOB_ERROR, EndCause.STAGE_TIMEOUT, EndCause.VALIDATION_FAILED)


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every event the hub carries."""


@dataclass(frozen=True, slots=True)
class WorkerJoined(Event):
    worker: Worker
    blobs: list[str]  # the blobs its hello says it holds
    tasks: tuple[str, ...] = ()  # the task attempts its hello says it still has (running, or done, unreported)


@dataclass(frozen=True, slots=True)
class WorkerLeft(Event):
    worker: Worker


@dataclass(frozen=True, slots=True)
class CandidatesAnnounced(Event):
    """IP addresses of the worker's own ICE candidates, seen in signalling it sent through the appliance."""

    worker: Worker
    addresses: tuple[str, ...]  # in the order the worker sent them


@dataclass(frozen=True, slots=True)
class BlobsDropped(Event):
    worker: Worker
    blobs: list[str]


@dataclass(frozen=True, slots=True)
class TransferFinished(Event):
    """A blob copy between two workers ended, or a peer link closed (``ok``: it did what it was for)."""

    transfer: Transfer | Link
    ok: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class TaskMessage(Event):
    """A message about a task from the worker running it (fleet.protocol.TASK_MESSAGES, or a binary frame)."""

    worker: Worker
    message: object


@dataclass(frozen=True, slots=True)
class RunEnded(Event):
    """A run that had started is over, whatever the outcome; published once, after its end is stored."""

    run_id: int
    owner: int
    state: str  # succeeded | failed | cancelled
    cause: EndCause
    attempts: list[AttemptRecord]  # every task attempt that finished or was abandoned
    accounts: Mapping[str, int]  # worker id -> account, of every worker that held a rank
    taken_off: frozenset[str]  # workers the coordinator sent away (timed out, misbehaved)
    private: bool
    gpu: bool


@dataclass(frozen=True, slots=True)
class SessionsEnded(Event):
    """Sessions were ended (signed out, their token revoked, their account disabled or changed): the
    connections opened with them must not outlive them."""

    key_hashes: frozenset[str]
    reason: str  # shown to the person whose worker tab is closed


EVENT_TYPES: tuple[type[Event], ...] = (
    WorkerJoined,
    WorkerLeft,
    CandidatesAnnounced,
    BlobsDropped,
    TransferFinished,
    TaskMessage,
    RunEnded,
    SessionsEnded,
)

E = TypeVar("E", bound=Event)
Handler = Callable[[E], Awaitable[None] | None]


class EventHub:
    def __init__(self) -> None:
        self._handlers: dict[type[Event], list[Handler]] = {kind: [] for kind in EVENT_TYPES}
        # Kinds with a coroutine function among their subscribers: publish_now cannot hand them out.
        self._awaited: set[type[Event]] = set()

    def subscribe(self, kind: type[E], handler: Handler[E]) -> None:
        if kind not in self._handlers:
            raise TypeError(f"{kind!r} is not an event type (appliance.events.EVENT_TYPES)")
        self._handlers[kind].append(handler)
        if inspect.iscoroutinefunction(handler):
            self._awaited.add(kind)

    def at_once(self, kind: type[Event]) -> bool:
        """Every subscriber of ``kind`` is a plain function: publish_now may hand its events out."""
        return kind not in self._awaited

    def publish_now(self, event: Event) -> None:
        """publish() without awaiting, for an event whose subscribers are all plain functions
        (at_once): a task message handled as it arrives behind an edge (fleet/connection.Session.take_now)."""
        for handler in self._handlers[type(event)]:
            try:
                if (result := handler(event)) is not None:  # an awaitable from a plain function
                    asyncio.ensure_future(result)
            except Exception:
                log.exception(
                    "%s subscriber %s failed", type(event).__name__, getattr(handler, "__qualname__", handler)
                )

    async def publish(self, event: Event) -> None:
        """Hand ``event`` to its subscribers in the order they subscribed, awaiting those that are
        coroutines. A subscriber's error is logged: it must not break the publisher (a worker's
        connection, the end of a run)."""
        handlers = self._handlers.get(type(event))
        if handlers is None:
            raise TypeError(f"{type(event)!r} is not an event type (appliance.events.EVENT_TYPES)")
        for handler in handlers:
            try:
                result = handler(event)
                if result is not None:  # a coroutine subscriber (synchronous ones return None)
                    await result
            except Exception:
                log.exception(
                    "%s subscriber %s failed", type(event).__name__, getattr(handler, "__qualname__", handler)
                )
