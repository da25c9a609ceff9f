"""The turns the connectivity probes take (fleet/probe.Turns): a few at once, the rest in arrival order,
and a worker that leaves while it waits gives up its place without holding up the others."""

from __future__ import annotations

from appliance.fleet.probe import Turns


def test_probes_take_turns_in_arrival_order_and_one_that_gives_up_is_skipped():
    turns, order = Turns(2), []
    places = {name: turns.take(lambda name=name: order.append(name)) for name in "abcdef"}
    assert order == ["a", "b"]  # two at once; the others wait
    places["c"].give_up()  # its worker left before its turn
    places["d"].give_up()
    turns.done()  # a's probe ended
    assert order == ["a", "b", "e"]
    for _ in range(3):
        turns.done()
    assert order == ["a", "b", "e", "f"]
    assert turns.free == 2 and not turns.waiting


def test_a_turn_is_handed_on_from_inside_a_start_and_a_place_given_up_after_its_turn_changes_nothing():
    turns, order = Turns(1), []

    def start(name: str) -> None:
        order.append(name)
        if name == "b":  # its probe could not start: it hands the turn on at once
            turns.done()

    first = turns.take(lambda: start("a"))
    turns.take(lambda: start("b"))
    turns.take(lambda: start("c"))
    first.give_up()  # it had its turn already
    turns.done()
    assert order == ["a", "b", "c"]
    turns.done()
    assert turns.free == 1 and not turns.waiting
