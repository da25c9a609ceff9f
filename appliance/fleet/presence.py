"""A paused worker is still connected: it stopped taking tasks for a reason of its own page (its
user, the battery, a busy computer, the working hours) and takes them again when that passes. Every
place that counts workers (Overview, Workers, the Run dialog, the CLI, a queued run's reason) counts
it as connected and says why it does not work, in the words of ``paused_note``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from appliance.fleet.registry import Worker

# What a page says when its user paused it (static/worker/runtime.js sends "by its user").
USER_PAUSE = "by its user"


def _reason(worker: Worker) -> str:
    reason = worker.pause_reason or USER_PAUSE
    return "paused on the worker page" if reason == USER_PAUSE else reason


def paused_note(workers: Iterable[Worker]) -> str:
    """Which of the connected ``workers`` are paused and why: "both paused: this computer is busy
    (critical CPU pressure)", "1 of them paused: this computer is on battery"; "" when none is."""
    workers = list(workers)
    reasons = Counter(_reason(w) for w in workers if w.paused)
    paused = sum(reasons.values())
    if not paused:
        return ""
    if paused == len(workers):
        how_many = "paused" if paused == 1 else "both paused" if paused == 2 else f"all {paused} paused"
    else:
        how_many = f"{paused} of them paused"
    why = "; ".join(reason if n == paused else f"{n}: {reason}" for reason, n in reasons.most_common())
    return f"{how_many}: {why}"
