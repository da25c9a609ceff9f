"""selection.ranked: devices plugged in and under no CPU pressure first, then the reliability score."""

from __future__ import annotations

from appliance.fleet.protocol import Capabilities
from appliance.fleet.registry import Worker
from appliance.jobs import selection


def worker(
    name: str,
    *,
    power: str = "unknown",
    pressure: str = "unknown",
    score: float = 0.0,
    connected_at: float = 0.0,
    **caps,
) -> Worker:
    async def unused(*_):  # ranking never talks to the worker
        raise AssertionError("ranking must not send")

    return Worker(
        worker_id=name,
        account_id=1,
        account_email="a@example.com",
        capabilities=Capabilities(power=power, pressure=pressure, **caps),
        client="test",
        send=unused,
        close=unused,
        score=score,
        connected_at=connected_at,
    )


def names(workers: list[Worker]) -> list[str]:
    return [w.worker_id for w in selection.ranked(workers)]


def test_plugged_in_before_unknown_before_on_battery_whatever_the_score():
    workers = [
        worker("battery", power="battery", score=50),
        worker("unknown", score=20),
        worker("plugged", power="plugged", score=1),
    ]
    assert names(workers) == ["plugged", "unknown", "battery"]


def test_among_plugged_in_devices_the_quieter_cpu_first_then_the_score():
    workers = [
        worker("serious", power="plugged", pressure="serious", score=9),
        worker("fair-low", power="plugged", pressure="fair", score=1),
        worker("fair-high", power="plugged", pressure="fair", score=5),
        worker("nominal", power="plugged", pressure="nominal"),
    ]
    assert names(workers) == ["nominal", "fair-high", "fair-low", "serious"]


def test_capacity_not_raw_cores_breaks_ties():
    workers = [
        worker("many-cores-small-share", cores=16, capacity=2, connected_at=1.0),
        worker("fewer-cores-larger-share", cores=8, capacity=4, connected_at=2.0),
        worker("no-capacity-said", cores=3, connected_at=0.0),
    ]
    assert names(workers) == ["fewer-cores-larger-share", "no-capacity-said", "many-cores-small-share"]


def test_among_equally_reliable_browsers_the_fastest_by_its_finished_tasks_first():
    workers = [worker("typical", connected_at=1.0), worker("slow"), worker("fast", connected_at=2.0)]
    speeds = {"slow": 0.3, "fast": 2.5}
    ranked = selection.ranked(workers, lambda worker_id: speeds.get(worker_id, 1.0))
    assert [w.worker_id for w in ranked] == ["fast", "typical", "slow"]
    assert names(workers) == ["slow", "typical", "fast"]  # without estimates: longest connected first
