"""A run's output as a download (appliance/jobs/outputs.py): JSON lines the browsers wrote go out as
they are, every other blob as JSON lines of its records, and a damaged blob says what is wrong."""

from __future__ import annotations

import asyncio

import pytest

from appliance.jobs import codecs
from appliance.jobs.codecs import BSON, CSV, JSON
from appliance.jobs.outputs import CHUNK_BYTES, csv_rows, json_lines


def download(blobs: list[tuple[str, bytes]], encode=json_lines) -> list[bytes]:
    """The chunks a download sends for the output blobs, in the routes' way (the first taken apart)."""

    async def each():
        for blob in blobs[1:]:
            yield blob

    async def chunks():
        return [chunk async for chunk in encode(blobs[0] if blobs else None, each())]

    return asyncio.run(chunks())


RECORDS = [("the", 3), ("big", 2**64), ("small", 1.5e-7), ("huge", 1e21), (7, {"nested": [1, None, True]}), ("", "")]


def test_json_lines_the_browsers_wrote_go_out_byte_for_byte():
    first, second = codecs.encode(JSON, RECORDS[:3]), codecs.encode(JSON, RECORDS[3:])
    # JavaScript's own text of its numbers, which a reader and writer in Python would change.
    assert b'["big",18446744073709552000]' in first and b'["huge",1e+21]' in second
    assert b"".join(download([(JSON, first), (JSON, second)])) == first + second


def test_a_large_output_goes_in_chunks():
    blob = codecs.encode(JSON, [(f"key{i}", i) for i in range(20_000)])
    chunks = download([(JSON, blob)])
    assert len(chunks) > 1 and max(map(len, chunks)) <= CHUNK_BYTES
    assert b"".join(chunks) == blob


@pytest.mark.parametrize(
    "blob",
    [
        codecs.encode(JSON, [("\ud800", "a lone surrogate"), ("b", 1)]),  # JSON escapes it as \ud800
        codecs.encode(JSON, [("a", 1)]) + b"\n  \n" + codecs.encode(JSON, [("b", 2)]),  # blank lines
        codecs.encode(JSON, [("a", 1)]).rstrip(b"\n"),  # no newline at its end
    ],
    ids=["lone surrogate", "blank lines", "no last newline"],
)
def test_json_lines_msgspec_cannot_read_as_they_are_still_download_as_their_records(blob):
    text = b"".join(download([(JSON, blob)]))
    lines = text.decode().split("\n")
    assert lines[-1] == "" and all(lines[:-1]), "one record a line, no blank ones"
    assert codecs.decode(JSON, text) == codecs.decode(JSON, blob)


@pytest.mark.parametrize("content_type", [CSV, BSON])
def test_csv_and_bson_outputs_download_as_json_lines(content_type):
    records = [("a", 1), ("b", "two"), ("c", None)]
    text = b"".join(download([(content_type, codecs.encode(content_type, records))]))
    assert text == codecs.encode(JSON, records)


def test_a_blob_that_is_not_json_lines_is_refused_with_the_line_at_fault():
    blob = codecs.encode(JSON, [("a", 1)]) + b'["b", NaN]\n'
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        download([(JSON, blob)])
    with pytest.raises(ValueError, match="line 1 is not a 2-element"):
        download([(JSON, b'["a", 1, 2]\n')])


def test_the_csv_download_reads_every_blob():
    blobs = [(JSON, codecs.encode(JSON, [("a", 1)])), (BSON, codecs.encode(BSON, [("b", "x,y")]))]
    assert b"".join(download(blobs, csv_rows)) == b'key,value\r\na,1\r\nb,"x,y"\r\n'


def test_no_output_downloads_as_nothing():
    assert download([]) == []
    assert download([], csv_rows) == [b"key,value\r\n"]
