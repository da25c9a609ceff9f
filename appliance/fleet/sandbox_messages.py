"""The worker page's messages with its job sandboxes, one msgspec struct each (docs/protocol.md, "Sandboxes").

The page (static/worker/tasks.js, sandboxes.js, peers.js), each sandbox frame (sandbox-frame.js) and
each sandbox Web Worker (sandbox.js) post these to each other as structured clones; none reaches the
appliance, and nothing here decodes them. They are declared as structs, as the WebSocket's are in
appliance/fleet/protocol.py, so that ``python -m appliance.fleet.protocol_js`` writes both into
static/worker/protocol.js, where the page's checks of what a sandbox sends read their limits.

Each struct is what the JS posts: its ``type`` and fields (camelCase), a field the JS may leave out
being UNSET. What a structured clone carries beyond JSON is bytes named by their JS type: an
ArrayBuffer (transferred) or a Blob of the tab's store (which the sandbox reads itself). A field the
page relays into a WebSocket message has that message's type, limits included.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, UnsetType

from appliance.fleet import protocol


def _as_in(message: type[msgspec.Struct], field: str):
    """The type of a WebSocket message's field (the limits the appliance holds the relayed value to)."""
    return next(f.type for f in msgspec.structs.fields(message) if f.name == field)


ArrayBuffer = Annotated[bytes, msgspec.Meta(extra={"js": "ArrayBuffer"})]
Blob = Annotated[bytes, msgspec.Meta(extra={"js": "Blob"})]
PsValue = Annotated[bytes, msgspec.Meta(max_length=protocol.MAX_VALUE_BYTES, extra={"js": "ArrayBuffer"})]
Scripts = dict[str, str]  # absolute URL -> the text of an appliance's script the sandbox imports (x-peermr-preload)

LogText = _as_in(protocol.LogLine, "text")
LogLevel = _as_in(protocol.LogLine, "level")
ErrorText = _as_in(protocol.TaskFailed, "error")
StackText = _as_in(protocol.TaskFailed, "stack")
WorkerSeconds = _as_in(protocol.TaskWorkerTimeout, "seconds")
Partition = _as_in(protocol.TaskPutUrl, "partition")

# One direct message's bytes at most; a receiving page keeps no more than this of them all either.
MAX_DIRECT_BYTES = 256 * 1024 * 1024
# A task's log lines at most: the sandbox sends no more (but a note), and the page passes on no more.
MAX_LOG_LINES = 10_000


class Message(msgspec.Struct, tag_field="type", rename="camel", omit_defaults=True):
    pass


class InputUrl(msgspec.Struct):
    """A task input the sandbox GETs itself (an s3 run's presigned URL)."""

    url: str


TaskInput = Blob | ArrayBuffer | InputUrl

# ---------------------------------------------------------------- page to frame


class Connect(Message, tag="connect"):
    """The page's first word to a sandbox frame, a window message once it has loaded: carries the control port."""


class Spawn(Message, tag="spawn"):
    """Start a sandbox Web Worker from the sandbox script's text, as a blob: URL of the frame; carries the
    sandbox's port. ``url`` is the script's URL on the appliance, which job URLs resolve against and
    stack frames name."""

    id: int
    url: str
    text: str
    scripts: Scripts


class Terminate(Message, tag="terminate"):
    """Stop that sandbox Web Worker."""

    id: int


# ---------------------------------------------------------------- frame to page


class Connected(Message, tag="connected"):
    """The frame took the control port (the page spawns sandboxes once it has this)."""


class SandboxError(Message, tag="error"):
    """A sandbox Web Worker's error: its script did not load or its top level threw (the file is the
    script's URL on the appliance, not the blob: one)."""

    id: int
    message: str
    filename: str
    lineno: int
    colno: int


# ---------------------------------------------------------------- frame to sandbox


class Port(Message, tag="port"):
    """The frame's only message to a sandbox: carries its port to the page, over which all that follows goes."""


# ---------------------------------------------------------------- page to sandbox


class Run(Message, tag="run"):
    """Run this task (the appliance's task-assign) on these inputs: Blobs of the tab's store, or URLs."""

    task: protocol.TaskAssign
    inputs: list[TaskInput]


class Input(Message, tag="input"):
    """A streaming reduce's pieces of one more producer rank (the appliance's task-input), now in the store."""

    task_id: str
    producer: int
    inputs: list[TaskInput]


class Split(Message, tag="split"):
    """A range's task stops before chunk ``before`` or later (the appliance's task-split)."""

    task_id: str
    before: int


class Load(Message, tag="load"):
    """A warm sandbox takes on a run: evaluate the run's sandbox script (its URL, its text, and the texts of
    the appliance's scripts it imports)."""

    url: str
    text: str
    scripts: Scripts


class UploadAnswer(Message):
    """The fields of an answer that gives a presigned PUT."""

    id: int
    url: str | UnsetType = UNSET
    key: str | UnsetType = UNSET
    error: str | UnsetType = UNSET


class PutUrl(UploadAnswer, tag="put-url"):
    """The answer to need-put-url: a presigned PUT for the output (url, key), or why not (error)."""


class Entered(Message, tag="entered"):
    """The answer to enter: whether the range's job may go on into the chunk (not once the page stopped
    the range before it: a split)."""

    id: int
    ok: bool


class PeerSent(Message, tag="peer-sent"):
    """The answer to peer-send: sent, or why not (error)."""

    id: int
    error: str | UnsetType = UNSET


class PeerPutUrlAnswer(UploadAnswer, tag="peer-put-url"):
    """The answer to peer-put-url: a presigned PUT for the message (url, key), or why not (error)."""


class PeerMessage(Message, tag="peer-message"):
    """The answer to peer-receive: the message's bytes (pmrfs), a presigned GET of them (s3), or an error."""

    id: int
    data: ArrayBuffer | UnsetType = UNSET
    url: str | UnsetType = UNSET
    error: str | UnsetType = UNSET


class PsReply(Message, tag="ps-reply"):
    """The answer to ps: the value read (dtype, data), the version written, the clock, or an error."""

    id: int
    error: str | UnsetType = UNSET
    dtype: protocol.Dtype | UnsetType = UNSET
    data: ArrayBuffer | UnsetType = UNSET
    version: int | UnsetType = UNSET
    clock: int | UnsetType = UNSET


class PeerDirect(Message, tag="peer-direct"):
    """A direct message from another rank, come over a link between the tabs."""

    rank: int
    tag: str
    data: ArrayBuffer


class PeerLost(Message, tag="peer-lost"):
    """A rank of the task's group lost its worker (the appliance's peer-lost): its collectives and direct
    receives fail."""

    rank: int
    reason: str


# ---------------------------------------------------------------- sandbox to page


class Ready(Message, tag="ready"):
    """The run's script defined the job; a reusable sandbox (no job scripts) may run the run's next task."""

    reusable: bool


class Log(Message, tag="log"):
    """A line of context.log or console.* (relayed in task-log)."""

    level: LogLevel
    text: LogText
    at: float


class Progress(Message, tag="progress"):
    """The task's counts so far (relayed in task-progress, at most twice a second)."""

    emits: protocol.Count
    bytes: protocol.Count
    ticks: protocol.Count
    beats: protocol.Count = 0  # the sandbox's heartbeat: its event loop turns (busy, not hung)
    read: protocol.Count = 0  # the input records the job has reached (a map reading them with for await...of)


class WorkerTimeout(Message, tag="worker-timeout"):
    """context.setWorkerTimeout(seconds) (relayed in task-worker-timeout)."""

    seconds: WorkerSeconds


class SplitAt(Message, tag="split-at"):
    """Where the range stops: before this chunk (relayed in task-split-at; its range's end when it could
    not stop early, 0 when the task is not a range)."""

    chunk: _as_in(protocol.TaskSplitAt, "chunk")


class Iterating(Message, tag="iterating"):
    """A range's job reads its input with for await...of (and had not read it otherwise): from now on
    it goes into each next chunk only with the page's leave (enter), so the page answers task-split
    itself, at once, even while the job computes without awaiting."""

    chunks: Annotated[list[_as_in(protocol.TaskSplitAt, "chunk")], msgspec.Meta(max_length=4096)]
    stop: _as_in(protocol.TaskSplitAt, "chunk")  # the range's end: the chunk after its last


class Enter(Message, tag="enter"):
    """May the range's job go on into this chunk? (answered with entered)."""

    id: int
    chunk: _as_in(protocol.TaskSplitAt, "chunk")


class NeedPutUrl(Message, tag="need-put-url"):
    """An s3 run's output needs a presigned PUT for its partition (the page asks with task-put-url)."""

    id: int
    partition: Partition


class Output(Message, tag="output"):
    """One output blob of a partition: its bytes, which the page stores (pmrfs), or the key it was PUT
    under (s3)."""

    partition: Partition
    records: protocol.Count
    data: ArrayBuffer | UnsetType = UNSET
    key: str | UnsetType = UNSET
    size: protocol.Count | UnsetType = UNSET


class Done(Message, tag="done"):
    """The task ended well once every output is delivered (the page reports task-done)."""

    emits: protocol.Count
    cpu_ms: protocol.Count


class Failed(Message, tag="failed"):
    """The task failed (the page reports task-failed); peerLost: the job did not catch a PeerLostError."""

    error: ErrorText
    stack: StackText
    peer_lost: bool


class PeerSend(Message, tag="peer-send"):
    """Send a message to another rank: its bytes, over a link (direct) or through the tab's store (pmrfs),
    or the key it was PUT under at a peer-put-url URL (s3)."""

    id: int
    rank: protocol.Rank
    tag: protocol.Tag
    data: ArrayBuffer | UnsetType = UNSET
    direct: bool | UnsetType = UNSET
    key: str | UnsetType = UNSET
    size: protocol.Count | UnsetType = UNSET


class PeerPutUrl(Message, tag="peer-put-url"):
    """An s3 run's indirect message needs a presigned PUT."""

    id: int
    rank: protocol.Rank
    tag: protocol.Tag


class PeerReceive(Message, tag="peer-receive"):
    """Receive another rank's indirect message with this tag (the page waits for the appliance's)."""

    id: int
    rank: protocol.Rank
    tag: protocol.Tag


class Ps(Message, tag="ps"):
    """A parameter-server request: write or update a value (dtype, data; a write may name the version it
    replaces, an update its fn), read a key, or wait for the clock."""

    id: int
    op: Literal["write", "update", "read", "clock"]
    key: protocol.ParamKey | UnsetType = UNSET
    dtype: protocol.Dtype | UnsetType = UNSET
    data: PsValue | UnsetType = UNSET
    fn: protocol.UpdateOp | UnsetType = UNSET
    version: protocol.Count | UnsetType = UNSET


# Each direction's messages, under the name static/worker/protocol.js gives it in SANDBOX_MESSAGES.
CHANNELS = {
    "pageToFrame": Connect | Spawn | Terminate,
    "frameToPage": Connected | SandboxError,
    "frameToSandbox": Port,
    "pageToSandbox": Run
    | Input
    | Split
    | Entered
    | Load
    | PutUrl
    | PeerSent
    | PeerPutUrlAnswer
    | PeerMessage
    | PsReply
    | PeerDirect
    | PeerLost,
    "sandboxToPage": (
        Ready
        | Log
        | Progress
        | WorkerTimeout
        | SplitAt
        | Iterating
        | Enter
        | NeedPutUrl
        | Output
        | Done
        | Failed
        | PeerSend
        | PeerPutUrl
        | PeerReceive
        | Ps
    ),
}
