"""Periodic work declared with BackgroundTasks.every: it keeps its pace through failures and ends on cancel."""

from __future__ import annotations

import asyncio
import time

from appliance.background import BackgroundTasks


async def test_periodic_work_goes_on_after_a_failed_round_and_stops_when_cancelled():
    rounds = []

    async def work() -> None:
        rounds.append(time.monotonic())
        if len(rounds) == 2:
            raise RuntimeError("the database is away")

    background = BackgroundTasks("test")
    started = time.monotonic()
    background.every(0.05, work)
    await asyncio.sleep(0.01)
    assert rounds == []  # the first round comes after one period
    while len(rounds) < 4:
        await asyncio.sleep(0.01)
    assert rounds[0] - started >= 0.05
    await asyncio.wait_for(background.drain(5), 1)  # drain does not wait for periodic work
    await background.cancel()
    done = len(rounds)
    await asyncio.sleep(0.15)
    assert len(rounds) == done
