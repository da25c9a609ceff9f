"""The engines the tests start themselves (tests/services.py): up when asked for, gone when stopped."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio

from tests.services import redis_server


async def test_redis_answers_and_is_gone_once_stopped():
    server = redis_server()
    try:
        async with redis.asyncio.from_url(server.url) as client:
            assert await client.ping()
            await client.set("greeting", "hello")
            assert await client.get("greeting") == b"hello"
    finally:
        server.stop()

    assert not server.directory.exists()
    async with redis.asyncio.from_url(server.url, socket_connect_timeout=2) as client:
        with pytest.raises(redis.ConnectionError):
            await client.ping()
