"""A run's output as downloads: JSON lines of ``[key, value]`` (the API) and CSV (the dashboard)."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator, Iterator

import msgspec

from appliance.accounts.actor import Actor
from appliance.cloud import service as cloud
from appliance.errors import Unavailable
from appliance.jobs import codecs
from appliance.jobs.tables import Run


async def cloud_reader(actor: Actor, run_id: int, keys: cloud.CloudKeys):
    """Reads objects of the run owner's bucket (for s3 runs), with the owner's saved credentials."""
    row = await Run.select(Run.owner).where(Run.id == run_id).first()
    owner = row["owner"] if row else actor.user_id

    async def read(key: str) -> bytes:
        storage = await cloud.storage_for(keys, owner)
        if storage is None:
            raise Unavailable("The run's output is in a cloud bucket, but the account has no Cloud Data settings now.")
        try:
            return await cloud.read_object(storage, key)
        except cloud.CloudDataError as exc:
            raise Unavailable(f"The run's output could not be read from the bucket: {exc}") from None

    return read


_encoder = msgspec.json.Encoder()


def _json_line(record) -> bytes:
    try:
        return _encoder.encode(list(record)) + b"\n"
    except UnicodeEncodeError:  # a lone surrogate, which JSON escapes as the browser wrote it
        return codecs.encode(codecs.JSON, [record])


CHUNK_BYTES = 64 * 1024  # what a download sends at a time: one send per record costs more than the record

_lines = msgspec.json.Decoder()


def _pairs_as_written(data: bytes) -> bool:
    """True when JSON lines a browser wrote can go out as they are: each line is a ``[key, value]``
    array (the download then keeps the browser's own text: JavaScript's forms of numbers, its escapes).

    Reading them with msgspec takes a tenth of the time decoding and writing each record takes.
    Anything msgspec does not read as such (a lone surrogate's escape, NaN, a blank line, a line
    that is not a pair) goes the slow way, which reads JavaScript's JSON exactly or says what is
    wrong with the blob."""
    if not data.endswith(b"\n"):
        return False
    try:
        rows = _lines.decode_lines(data)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return False
    return len(rows) == data.count(b"\n") and all(type(row) is list and len(row) == 2 for row in rows)


def _blob_lines(content_type: str, data: bytes) -> Iterator[bytes]:
    if content_type == codecs.JSON and _pairs_as_written(data):
        for at in range(0, len(data), CHUNK_BYTES):
            yield data[at : at + CHUNK_BYTES]
        return
    chunk = bytearray()
    for record in codecs.decode(content_type, data):
        chunk += _json_line(record)
        if len(chunk) >= CHUNK_BYTES:
            yield bytes(chunk)
            chunk.clear()
    if chunk:
        yield bytes(chunk)


async def _each(first: tuple[str, bytes] | None, blobs: AsyncIterator[tuple[str, bytes]]):
    """The output blobs (``service.run_output_blobs``), the first of them taken already."""
    if first is None:
        return
    yield first
    async for blob in blobs:
        yield blob


async def json_lines(first: tuple[str, bytes] | None, blobs: AsyncIterator[tuple[str, bytes]]) -> AsyncIterator[bytes]:
    async for content_type, data in _each(first, blobs):
        for chunk in _blob_lines(content_type, data):
            yield chunk


def _cell(value) -> str:
    if isinstance(value, str):
        return value
    try:
        return _encoder.encode(value).decode()
    except UnicodeEncodeError:
        return codecs.key_string(value)  # JSON text with lone surrogates escaped


async def csv_rows(first: tuple[str, bytes] | None, blobs: AsyncIterator[tuple[str, bytes]]) -> AsyncIterator[bytes]:
    """``key,value`` rows; a value that is not a string is written as its JSON text."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["key", "value"])
    async for content_type, data in _each(first, blobs):
        for key, value in codecs.decode(content_type, data):
            writer.writerow([_cell(key), _cell(value)])
            if buffer.tell() > CHUNK_BYTES:
                yield codecs.utf8(buffer.getvalue())
                buffer.seek(0)
                buffer.truncate()
    yield codecs.utf8(buffer.getvalue())
