"""The worker WebSocket protocol: every message as a msgspec struct (docs/protocol.md).

JSON text frames, each an object with a "type"; requests carry an "id" that the
answer repeats as "replyTo". Anything that does not decode into one of the
worker-to-server structs below is refused with an ``Error``.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from appliance.json_depth import TOO_DEEP, too_deep

# A reduce task's done message lists one output per partition and flush, so this is generous.
MAX_MESSAGE_BYTES = 1024 * 1024
WORKER_ID_PATTERN = r"^[A-Za-z0-9_-]{8,64}$"

Short = Annotated[str, msgspec.Meta(max_length=256)]
Sha256 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
Instance = Annotated[str, msgspec.Meta(pattern=r"^([0-9a-f]{8,32})?$")]


class Base(msgspec.Struct, tag_field="type", rename="camel", forbid_unknown_fields=False, omit_defaults=True):
    pass


# ---------------------------------------------------------------- worker to server


# Software WebGPU implementations, as adapters name their architecture, vendor or description. The
# worker page (static/worker/runtime.js) and the examples match the same names (a unit test checks).
SOFTWARE_ADAPTERS = ("swiftshader", "llvmpipe", "lavapipe", "softpipe", "microsoft basic render")


class Gpu(msgspec.Struct, rename="camel"):
    """The WebGPU adapter a Web Worker of the tab gets (what job code would get)."""

    info: dict[Short, Short] = {}
    features: Annotated[list[Short], msgspec.Meta(max_length=256)] = []
    limits: dict[Short, int | float] = {}
    # GPUAdapterInfo.isFallbackAdapter: the browser says the adapter is a software one.
    fallback: bool = False

    @property
    def software(self) -> bool:
        """A CPU implementation of WebGPU (SwiftShader and the like), not a GPU."""
        named = " ".join(self.info.get(k, "") for k in ("vendor", "architecture", "description")).lower()
        return self.fallback or any(name in named for name in SOFTWARE_ADAPTERS)

    @property
    def label(self) -> str:
        """E.g. "nvidia ampere" or "google swiftshader (software)"."""
        name = " ".join(v for v in (self.info.get("vendor"), self.info.get("architecture")) if v) or "WebGPU"
        return f"{name} (software)" if self.software else name


# The device's power source (Battery Status API) and CPU pressure (Compute Pressure API), where the
# browser has them; the scheduler prefers plugged-in, unpressured workers (jobs/selection.py).
Power = Literal["plugged", "battery", "unknown"]
Pressure = Literal["nominal", "fair", "serious", "critical", "unknown"]


class Capabilities(msgspec.Struct, rename="camel"):
    cores: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 1
    # navigator.deviceMemory in GiB (browsers round it and cap it at 8); null when not exposed.
    memory_gib: Annotated[float, msgspec.Meta(ge=0, le=65536)] | None = None
    user_agent: Annotated[str, msgspec.Meta(max_length=512)] = ""
    gpu: Gpu | None = None
    visibility: Literal["visible", "hidden"] = "visible"
    storage_quota: Annotated[int, msgspec.Meta(ge=0)] = 0
    storage_usage: Annotated[int, msgspec.Meta(ge=0)] = 0
    # How many tasks (Web Workers) the tab runs at once at most: its share of the cores (courtesy.js).
    capacity: Annotated[int, msgspec.Meta(ge=1, le=4096)] | None = None
    power: Power = "unknown"
    pressure: Pressure = "unknown"


class Hello(Base, tag="hello"):
    id: int
    worker_id: Annotated[str, msgspec.Meta(pattern=WORKER_ID_PATTERN)]
    capabilities: Capabilities
    # The blobs this tab still holds from earlier sessions (PMRFS reports them to the namenode).
    blobs: Annotated[list[Sha256], msgspec.Meta(max_length=100_000)] = []
    # The tasks it still runs, or finished while it was disconnected and will report now.
    tasks: Annotated[list[TaskId], msgspec.Meta(max_length=64)] = []
    # Random per page load: the same worker id with another instance is a page that started again,
    # and its peers' connections to the old one are gone with it.
    instance: Instance = ""


class Pong(Base, tag="pong"):
    id: int
    # How long the tab's store (IndexedDB, served by the browser process) has left a check unanswered.
    store_wait_ms: Annotated[int, msgspec.Meta(ge=0)] = 0


class Visibility(Base, tag="visibility"):
    state: Literal["visible", "hidden"]


class Conditions(Base, tag="conditions"):
    capacity: Annotated[int, msgspec.Meta(ge=1, le=4096)] | None = None
    power: Power = "unknown"
    pressure: Pressure = "unknown"


class Pause(Base, tag="pause"):
    id: int | None = None
    # Why, in a few words for the Workers page: "paused by its user", "on battery", ...
    reason: Annotated[str, msgspec.Meta(max_length=100)] = ""


class Resume(Base, tag="resume"):
    id: int | None = None


class ProbeAnswer(Base, tag="probe-answer"):
    reply_to: int
    sdp: Annotated[str, msgspec.Meta(max_length=32 * 1024)]


TransferId = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{16}$")]
Reason = Annotated[str, msgspec.Meta(max_length=200)]


class Signal(Base, tag="signal"):
    """SDP or an ICE candidate for the other end of an arranged transfer."""

    transfer_id: TransferId
    data: dict


class BlobStored(Base, tag="blob-stored"):
    sha256: Sha256
    size: Annotated[int, msgspec.Meta(ge=0)]
    reply_to: int | None = None
    transfer_id: TransferId | None = None


class BlobUploaded(Base, tag="blob-uploaded"):
    reply_to: int
    sha256: Sha256
    size: Annotated[int, msgspec.Meta(ge=0)]


class BlobFailed(Base, tag="blob-failed"):
    sha256: Sha256
    reason: Reason
    reply_to: int | None = None
    transfer_id: TransferId | None = None


class TransferBytes(Base, tag="transfer-bytes"):
    transfer_id: TransferId
    bytes: Annotated[int, msgspec.Meta(ge=0)]


class BlobsDropped(Base, tag="blobs-dropped"):
    """The tab lost or cleared these blobs (the person pressed "clear my stored data")."""

    sha256: Annotated[list[Sha256], msgspec.Meta(max_length=100_000)]


class Stored(Base, tag="stored"):
    """What the tab's store holds now (PMRFS replicas and run blobs alike), as the worker page shows it."""

    blobs: Annotated[int, msgspec.Meta(ge=0)]
    bytes: Annotated[int, msgspec.Meta(ge=0)]


# ---------------------------------------------------------------- tasks (worker to server)

# run.group.stage.rank.attempt; a chunk after a rank's first names its rank "c" chunk (execution.py).
TaskId = Annotated[str, msgspec.Meta(pattern=r"^\d{1,18}\.[A-Z]\.-?\d{1,4}\.\d{1,4}(c\d{1,3})?\.\d{1,6}$")]
Count = Annotated[int, msgspec.Meta(ge=0)]


class TaskProgress(Base, tag="task-progress"):
    task_id: TaskId
    emits: Count
    bytes: Count = 0
    ticks: Count = 0  # context.progress() calls
    beats: Count = 0  # the sandbox's heartbeats: the task's event loop turns (it is busy, not hung)
    read: Count = 0  # the input records its job has reached (a map reading them with for await...of)


class LogLine(msgspec.Struct):
    at: Annotated[float, msgspec.Meta(ge=0)]
    text: Annotated[str, msgspec.Meta(max_length=2000)]
    level: Literal["info", "warn", "error"] = "info"


class TaskLog(Base, tag="task-log"):
    task_id: TaskId
    lines: Annotated[list[LogLine], msgspec.Meta(max_length=100)]


class TaskWorkerTimeout(Base, tag="task-worker-timeout"):
    task_id: TaskId
    seconds: Annotated[float, msgspec.Meta(gt=0, le=7 * 24 * 3600)]


class TaskSplitAt(Base, tag="task-split-at"):
    """The answer to a task-split: the range's task stops before this chunk (the end of its range:
    it could not split)."""

    task_id: TaskId
    chunk: Annotated[int, msgspec.Meta(ge=0, lt=8192)]


class TaskPutUrl(Base, tag="task-put-url"):
    id: int
    task_id: TaskId
    partition: Annotated[int, msgspec.Meta(ge=0, lt=8192)]


class TaskOutput(msgspec.Struct):
    partition: Annotated[int, msgspec.Meta(ge=0, lt=8192)]
    size: Count
    records: Count
    sha256: Sha256 | None = None
    key: Annotated[str, msgspec.Meta(max_length=1024)] | None = None


class TaskDone(Base, tag="task-done"):
    task_id: TaskId
    outputs: Annotated[list[TaskOutput], msgspec.Meta(max_length=4096)]
    emits: Count = 0
    cpu_ms: Count = 0
    # A range that stopped early (task-split): the chunk it stopped before, as its task-split-at said
    # (0: it ran what it was given). The appliance may have missed that answer (a restart).
    stop: Count = 0


class TaskFailed(Base, tag="task-failed"):
    task_id: TaskId
    error: Annotated[str, msgspec.Meta(max_length=2000)]
    stack: Annotated[str, msgspec.Meta(max_length=8000)] = ""
    # The job did not catch a collective's or direct receive's PeerLostError (another rank left).
    peer_lost: bool = False
    # An input blob was not in the worker's store (the coordinator recomputes it).
    input_missing: Sha256 | None = None


# ---------------------------------------------------------------- peers and the parameter server (worker to server)

Rank = Annotated[int, msgspec.Meta(ge=0, lt=8192)]
Tag = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
ParamKey = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Dtype = Literal["float32", "float64", "int8", "int16", "int32", "uint8", "uint16", "uint32"]
UpdateOp = Literal["add", "max", "min", "mul", "replace"]


class PeerSend(Base, tag="peer-send"):
    """An indirect message to another rank, already stored: a blob in this tab (pmrfs) or an object (s3)."""

    id: int
    task_id: TaskId
    to_rank: Rank
    tag: Tag
    size: Count
    sha256: Sha256 | None = None
    key: Annotated[str, msgspec.Meta(max_length=1024)] | None = None


class PeerPutUrl(Base, tag="peer-put-url"):
    id: int
    task_id: TaskId
    to_rank: Rank
    tag: Tag


class PeerReceive(Base, tag="peer-receive"):
    id: int
    task_id: TaskId
    from_rank: Rank
    tag: Tag


class PeerLink(Base, tag="peer-link"):
    """Arrange a direct WebRTC link to the worker that holds ``to_rank`` now."""

    id: int
    task_id: TaskId
    to_rank: Rank


class PsRead(Base, tag="ps-read"):
    id: int
    task_id: TaskId
    key: ParamKey


class PsClock(Base, tag="ps-clock"):
    id: int
    task_id: TaskId


# Binary frames: uint32 LE header length, the JSON header, then the value's little-endian bytes.
class PsWrite(Base, tag="ps-write"):
    id: int
    task_id: TaskId
    key: ParamKey
    dtype: Dtype
    # Compare-and-set: written only when the stored version is this one (0: the key does not exist).
    if_version: Count | None = None


class PsUpdate(Base, tag="ps-update"):
    id: int
    task_id: TaskId
    key: ParamKey
    dtype: Dtype
    op: UpdateOp = "add"


TASK_MESSAGES = (
    TaskProgress,
    TaskLog,
    TaskWorkerTimeout,
    TaskSplitAt,
    TaskPutUrl,
    TaskDone,
    TaskFailed,
    PeerSend,
    PeerPutUrl,
    PeerReceive,
    PeerLink,
    PsRead,
    PsClock,
    PsWrite,
    PsUpdate,
)

Incoming = (
    Hello
    | Pong
    | Stored
    | Visibility
    | Conditions
    | Pause
    | Resume
    | ProbeAnswer
    | Signal
    | BlobStored
    | BlobUploaded
    | BlobFailed
    | TransferBytes
    | BlobsDropped
    | TaskProgress
    | TaskLog
    | TaskWorkerTimeout
    | TaskSplitAt
    | TaskPutUrl
    | TaskDone
    | TaskFailed
    | PeerSend
    | PeerPutUrl
    | PeerReceive
    | PeerLink
    | PsRead
    | PsClock
)
incoming_decoder = msgspec.json.Decoder(Incoming)
binary_header_decoder = msgspec.json.Decoder(PsWrite | PsUpdate)

MAX_HEADER_BYTES = 64 * 1024
# The largest parameter-server value a binary frame may carry (the WebSocket limit is set above it).
MAX_VALUE_BYTES = 64 * 1024 * 1024
MAX_BINARY_FRAME = 4 + MAX_HEADER_BYTES + MAX_VALUE_BYTES

# ---------------------------------------------------------------- server to worker


class Welcome(Base, tag="welcome"):
    reply_to: int
    worker_id: str
    account: str
    ping_seconds: int
    ice_servers: list[dict]


class ProbeOffer(Base, tag="probe-offer"):
    id: int
    sdp: str


class BlobFetch(Base, tag="blob-fetch"):
    """Fetch a blob from the appliance over HTTP (the URL carries the grant) and store it."""

    id: int
    sha256: str
    size: int
    url: str


class BlobUpload(Base, tag="blob-upload"):
    """PUT a stored blob to the appliance at the URL."""

    id: int
    sha256: str
    url: str


class BlobSend(Base, tag="blob-send"):
    transfer_id: str
    sha256: str
    to: str
    to_instance: str = ""  # the target's page load: a connection to an older one is not used


class BlobReceive(Base, tag="blob-receive"):
    transfer_id: str
    sha256: str
    size: int
    from_: str = msgspec.field(name="from")
    from_instance: str = ""


class BlobDelete(Base, tag="blob-delete"):
    sha256: str


class SignalOut(Base, tag="signal"):
    transfer_id: str
    data: dict


class TaskAssign(Base, tag="task-assign"):
    """Run one task in a fresh sandboxed Web Worker (docs/protocol.md, "Tasks")."""

    task_id: str
    run_id: int
    script: str
    kind: Literal["input", "map", "reduce"]
    stage: int
    group: str
    rank: int
    worker_count: int
    partitioning: Literal["chunks", "hash", "rank"]
    input_content_type: str
    output_content_type: str
    inputs: list[dict]
    wasm: dict[str, str]
    storage: Literal["pmrfs", "s3"]
    worker_timeout: float
    fetch_origins: list[str]
    seed: int = 0
    staleness: int = 0
    # Bumped each time a rank of the group loses its worker: direct messages of older epochs are dropped.
    epoch: int = 0
    # Run the next stage's reduce function on each flush's groups before they are sent (a combiner).
    combine: bool = False
    # The worker runs another task of the run after this one: it may start its sandbox ahead.
    prepare_next: bool = False
    # A warm sandbox of this URL may load the run's script (same Content-Security-Policy), or "".
    warm: str = ""
    # A reduce started before the maps it reads were all done: the producers whose pieces are still
    # to come in task-input messages (then ``inputs`` name each piece's ``producer``). A producer is
    # numbered by its place among the reduce's producers: rank * chunks + chunk of the map stage.
    awaiting: list[int] = msgspec.field(default_factory=list)
    # The input function: how many chunks each rank's piece is cut into (piece rank * chunks + chunk).
    chunks: int = 1
    # The input function: rank r's share of the array (its piece is in proportion, contiguous, in rank
    # order); empty for equal pieces.
    shares: list[int] = msgspec.field(default_factory=list)
    # A reduce: how many map tasks it reads (one per rank, or per chunk of a split map stage).
    producers: int = 0


class TaskInput(Base, tag="task-input"):
    """The pieces of one more producer of a streaming reduce, now in the worker's store (in the
    producer's order; none when it wrote nothing for this rank)."""

    task_id: str
    producer: int
    inputs: list[dict]


class TaskPrepare(Base, tag="task-prepare"):
    """The worker holds a rank of a run that starts: it may start the run's sandbox before its first task."""

    run_id: int
    script: str
    warm: str = ""  # as in task-assign


class TaskCancel(Base, tag="task-cancel"):
    task_id: str


class TaskSplit(Base, tag="task-split"):
    """A range's task is asked to stop before chunk ``before`` (or the first chunk it has not
    started after that), so free workers take the rest; it answers with task-split-at."""

    task_id: str
    before: int


class TaskPutUrlReply(Base, tag="task-put-url-reply"):
    reply_to: int
    url: str = ""
    key: str = ""
    error: str = ""


class PeerSendReply(Base, tag="peer-send-reply"):
    reply_to: int
    error: str = ""


class PeerPutUrlReply(Base, tag="peer-put-url-reply"):
    reply_to: int
    url: str = ""
    key: str = ""
    error: str = ""


class PeerMessage(Base, tag="peer-message"):
    """A received indirect message: now in the tab's store (sha256) or at a presigned URL (s3)."""

    reply_to: int
    size: int = 0
    sha256: str = ""
    url: str = ""
    error: str = ""


class PeerLinkOpen(Base, tag="peer-link-open"):
    """Another worker of the same run will open a direct link to this one under ``link_id``."""

    link_id: str
    from_: str = msgspec.field(name="from")
    run_id: int = 0
    from_instance: str = ""


class PeerLinkReply(Base, tag="peer-link-reply"):
    reply_to: int
    link_id: str = ""
    to: str = ""
    error: str = ""
    to_instance: str = ""


class PeerLost(Base, tag="peer-lost"):
    """A rank of the run lost its worker: direct receives from it and collectives cannot complete."""

    run_id: int
    group: str
    rank: int
    reason: str


class PsReply(Base, tag="ps-reply"):
    """The answer to a ps-* request; a binary frame's header when it carries a value."""

    reply_to: int
    error: str = ""
    dtype: str = ""
    version: int = 0
    clock: int = 0


PEER_REQUESTS = (PeerSend, PeerPutUrl, PeerReceive, PeerLink, PsRead, PsClock, PsWrite, PsUpdate)
# A task's messages that wait for an answer: refused with one when the task is not the sender's.
TASK_REQUESTS = (TaskPutUrl, *PEER_REQUESTS)
_REPLIES = {
    TaskPutUrl: TaskPutUrlReply,
    PeerSend: PeerSendReply,
    PeerPutUrl: PeerPutUrlReply,
    PeerReceive: PeerMessage,
    PeerLink: PeerLinkReply,
}


def refusal(request: Base, error: str) -> Base:
    """The reply that refuses a task's upload-URL, peer or parameter-server request."""
    return _REPLIES.get(type(request), PsReply)(reply_to=request.id, error=error)


class Frame(msgspec.Struct):
    """A message sent as a binary frame: ``header`` (a message above) followed by ``payload``."""

    header: Base
    payload: bytes | memoryview


class Ping(Base, tag="ping"):
    id: int


class State(Base, tag="state"):
    state: Literal["idle", "busy", "paused"]
    reply_to: int | None = None


class Error(Base, tag="error"):
    code: Literal["malformed", "too-large", "not-ready", "duplicate-worker", "already-hello", "not-allowed"]
    message: str
    reply_to: int | None = None


class HelloAgain(Base, tag="hello-again"):
    """From an edge (past one machine): another scheduler leads now; the page says hello on the same
    socket, as after a reconnect (docs/protocol.md, "Edges")."""


class Disconnect(Base, tag="disconnect"):
    reason: str
    # False: the worker page should not reconnect on its own (an admin sent it away).
    reconnect: bool = True


encoder = msgspec.json.Encoder()


def encode_frame(frame: Frame) -> bytes:
    header = encoder.encode(frame.header)
    return len(header).to_bytes(4, "little") + header + bytes(frame.payload)


def _decode(decoder: msgspec.json.Decoder, text: bytes | str):
    # Nesting is refused before the decoder recurses into it (appliance/json_depth.py).
    if too_deep(text):
        raise msgspec.DecodeError(TOO_DEEP)
    return decoder.decode(text)


def decode_message(text: str) -> Incoming:
    """A text frame's message; raises msgspec.DecodeError for anything else."""
    return _decode(incoming_decoder, text)


def decode_frame(data: bytes) -> tuple[PsWrite | PsUpdate, memoryview]:
    """Split a binary frame; raises ValueError (bad layout) or msgspec.DecodeError (bad header)."""
    if len(data) < 4:
        raise ValueError("a binary frame starts with its header's length (4 bytes)")
    size = int.from_bytes(data[:4], "little")
    if size > MAX_HEADER_BYTES or 4 + size > len(data):
        raise ValueError(f"a binary frame's header length ({size}) does not fit the frame")
    view = memoryview(data)
    return _decode(binary_header_decoder, bytes(view[4 : 4 + size])), view[4 + size :]
