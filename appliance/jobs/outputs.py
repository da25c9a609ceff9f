"""A run's output as downloads: JSON lines of ``[key, value]`` (the API) and CSV (the dashboard)."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator

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


async def json_lines(first, records: AsyncIterator) -> AsyncIterator[bytes]:
    if first is None:
        return
    chunk = bytearray(_json_line(first))
    async for record in records:
        chunk += _json_line(record)
        if len(chunk) >= CHUNK_BYTES:
            yield bytes(chunk)
            chunk.clear()
    yield bytes(chunk)


def _cell(value) -> str:
    if isinstance(value, str):
        return value
    try:
        return _encoder.encode(value).decode()
    except UnicodeEncodeError:
        return codecs.key_string(value)  # JSON text with lone surrogates escaped


async def csv_rows(first, records: AsyncIterator) -> AsyncIterator[bytes]:
    """``key,value`` rows; a value that is not a string is written as its JSON text."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["key", "value"])
    if first is not None:
        writer.writerow([_cell(first[0]), _cell(first[1])])
        async for key, value in records:
            writer.writerow([_cell(key), _cell(value)])
            if buffer.tell() > CHUNK_BYTES:
                yield codecs.utf8(buffer.getvalue())
                buffer.seek(0)
                buffer.truncate()
    yield codecs.utf8(buffer.getvalue())
