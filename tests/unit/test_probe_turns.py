"""The turns the connectivity probes take (fleet/probe.Turns): a few at once, the rest in arrival order,
and a worker that leaves while it waits gives up its place without holding up the others."""

from __future__ import annotations

import asyncio

from appliance.fleet.probe import Turns


async def test_probes_take_turns_in_arrival_order_and_one_that_gives_up_is_skipped():
    turns, order, release = Turns(2), [], asyncio.Event()

    async def probe(name: str) -> None:
        async with turns.turn():
            order.append(name)
            await release.wait()

    tasks = {name: asyncio.create_task(probe(name)) for name in "abcdef"}
    await asyncio.sleep(0)
    assert order == ["a", "b"]  # two at once; the others wait
    tasks["c"].cancel()  # its worker left before its turn
    tasks["d"].cancel()
    release.set()
    await asyncio.gather(*tasks.values(), return_exceptions=True)
    assert order == ["a", "b", "e", "f"]
    assert turns.free == 2 and not turns.waiting


async def test_a_turn_handed_to_a_waiter_that_gives_up_at_that_moment_goes_to_the_next():
    turns, order = Turns(1), []
    held = asyncio.Event()

    async def probe(name: str) -> None:
        async with turns.turn():
            order.append(name)
            if name == "a":
                await held.wait()

    first, second, third = (asyncio.create_task(probe(name)) for name in "abc")
    await asyncio.sleep(0)
    held.set()
    await asyncio.sleep(0)  # "a" ran and passed its turn to "b", which has not run since
    assert first.done() and order == ["a"]
    second.cancel()
    await asyncio.gather(second, third, return_exceptions=True)
    assert order == ["a", "c"]
    assert turns.free == 1 and not turns.waiting
