"""The worker WebSocket protocol: every message as a msgspec struct (docs/protocol.md).

JSON text frames, each an object with a "type"; requests carry an "id" that the
answer repeats as "replyTo". Anything that does not decode into one of the
worker-to-server structs below is refused with an ``Error``.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

MAX_MESSAGE_BYTES = 64 * 1024
WORKER_ID_PATTERN = r"^[A-Za-z0-9_-]{8,64}$"

Short = Annotated[str, msgspec.Meta(max_length=256)]
Sha256 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]


class Base(msgspec.Struct, tag_field="type", rename="camel", forbid_unknown_fields=False, omit_defaults=True):
    pass


# ---------------------------------------------------------------- worker to server


class Gpu(msgspec.Struct, rename="camel"):
    info: dict[Short, Short] = {}
    features: Annotated[list[Short], msgspec.Meta(max_length=256)] = []
    limits: dict[Short, int | float] = {}


class Capabilities(msgspec.Struct, rename="camel"):
    cores: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 1
    # navigator.deviceMemory in GiB (browsers round it and cap it at 8); null when not exposed.
    memory_gib: Annotated[float, msgspec.Meta(ge=0, le=65536)] | None = None
    user_agent: Annotated[str, msgspec.Meta(max_length=512)] = ""
    gpu: Gpu | None = None
    visibility: Literal["visible", "hidden"] = "visible"
    storage_quota: Annotated[int, msgspec.Meta(ge=0)] = 0
    storage_usage: Annotated[int, msgspec.Meta(ge=0)] = 0


class Hello(Base, tag="hello"):
    id: int
    worker_id: Annotated[str, msgspec.Meta(pattern=WORKER_ID_PATTERN)]
    capabilities: Capabilities
    # The blobs this tab still holds from earlier sessions (PMRFS reports them to the namenode).
    blobs: Annotated[list[Sha256], msgspec.Meta(max_length=100_000)] = []


class Pong(Base, tag="pong"):
    id: int


class Visibility(Base, tag="visibility"):
    state: Literal["visible", "hidden"]


class Pause(Base, tag="pause"):
    id: int | None = None


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


Incoming = (
    Hello
    | Pong
    | Visibility
    | Pause
    | Resume
    | ProbeAnswer
    | Signal
    | BlobStored
    | BlobUploaded
    | BlobFailed
    | TransferBytes
    | BlobsDropped
)
incoming_decoder = msgspec.json.Decoder(Incoming)

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


class BlobReceive(Base, tag="blob-receive"):
    transfer_id: str
    sha256: str
    size: int
    from_: str = msgspec.field(name="from")


class BlobDelete(Base, tag="blob-delete"):
    sha256: str


class SignalOut(Base, tag="signal"):
    transfer_id: str
    data: dict


class Ping(Base, tag="ping"):
    id: int


class State(Base, tag="state"):
    state: Literal["idle", "busy", "paused"]
    reply_to: int | None = None


class Error(Base, tag="error"):
    code: Literal["malformed", "too-large", "not-ready", "duplicate-worker", "already-hello", "not-allowed"]
    message: str
    reply_to: int | None = None


class Disconnect(Base, tag="disconnect"):
    reason: str
    # False: the worker page should not reconnect on its own (an admin sent it away).
    reconnect: bool = True


encoder = msgspec.json.Encoder()
