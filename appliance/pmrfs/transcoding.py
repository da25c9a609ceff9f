"""Saved stage outputs read back in their content type.

A run's stage outputs travel between browsers in the shuffle format (static/worker/codecs.js); when
the run keeps them (``saveIntermediateOutput``) they stay that way in the browsers, and a download
turns each blob into the records of the object's content type as it streams. Keys of a stage that
fed a reduce come back as the strings the reduce saw them as, each key's records together.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from appliance.jobs import codecs

SHUFFLE_ENCODING = "shuffle"  # StoredObject.encoding


async def transcoded(blobs: AsyncIterator[bytes], content_type: str) -> AsyncIterator[bytes]:
    async for data in blobs:
        yield codecs.encode(content_type, codecs.decode(codecs.SHUFFLE, data))
