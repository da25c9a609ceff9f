"""fleet/presence.py: paused workers are connected, and the counts say why they do not work."""

from __future__ import annotations

import pytest

from appliance.fleet.presence import paused_note
from tests.unit.test_worker_selection import worker

BUSY = "this computer is busy (critical CPU pressure)"
BATTERY = "this computer is on battery"


def fleet(*reasons: str | None):
    """A worker per reason: None, working; "" or a text, paused (by its user, or for that reason)."""
    workers = []
    for i, reason in enumerate(reasons):
        w = worker(f"w{i}")
        w.paused, w.pause_reason = reason is not None, reason or ""
        workers.append(w)
    return workers


@pytest.mark.parametrize(
    "reasons,shown",
    [
        ((None, None), ""),
        ((), ""),
        ((BUSY, BUSY), f"both paused: {BUSY}"),
        ((BUSY,), f"paused: {BUSY}"),
        ((BUSY, BUSY, BUSY), f"all 3 paused: {BUSY}"),
        ((None, BATTERY, None), f"1 of them paused: {BATTERY}"),
        (
            (BUSY, BUSY, BATTERY, "by its user"),
            f"all 4 paused: 2: {BUSY}; 1: {BATTERY}; 1: paused on the worker page",
        ),
    ],
)
def test_paused_workers_are_counted_as_connected_with_their_reason(reasons, shown):
    assert paused_note(fleet(*reasons)) == shown
