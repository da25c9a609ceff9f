"""The Overview's plots from fleet samples (metrics/plots.py): what each line says and where it is drawn."""

from __future__ import annotations

import datetime as dt

from appliance.metrics.plots import HEIGHT, WIDTH, account_plots, fleet_plots, totals

T0 = dt.datetime(2026, 11, 25, 4, 0, tzinfo=dt.UTC)


def sample(minute: int, workers: int, busy: int, tasks: int, peer: int, relayed_total: int) -> dict:
    return {
        "at": T0 + dt.timedelta(minutes=minute),
        "workers": workers,
        "busy": busy,
        "tasks_done": tasks,
        "peer_bytes": peer,
        "relayed_total": relayed_total,
        "seconds": 60,
        "runs_running": 0,
        "runs_queued": 0,
    }


def points(line) -> list[tuple[float, float]]:
    return [tuple(map(float, p.split(","))) for p in line.points.split()]


def test_each_plot_spans_the_box_and_names_its_latest_values():
    samples = [sample(0, 0, 0, 0, 0, 100), sample(1, 4, 2, 120, 2048, 1124), sample(2, 3, 0, 60, 0, 1124)]
    fleet, tasks, traffic = fleet_plots(samples)
    assert [line.last for line in fleet.lines] == ["3", "0"] and fleet.top == "4"
    # Time runs left to right across the whole box; the largest value touches the top.
    connected = points(fleet.lines[0])
    assert connected[0][0] == 0 and connected[-1][0] == WIDTH
    assert min(y for _, y in connected) == 2 and max(y for _, y in connected) == HEIGHT - 2
    assert tasks.lines[0].last == "1.0" and tasks.top == "2.0"  # 60 and 120 tasks a minute
    # Bytes per second of each sample's minute; relayed bytes are the growth of TURN's cumulative count
    # between samples (the first has none).
    assert [line.last for line in traffic.lines] == ["0 B/s", "0 B/s"] and traffic.top == "34 B/s"
    assert fleet.summary == "Workers connected over the last 2 min: now connected 3, busy 0; at most 4"
    assert totals(samples) == {"tasks": 180, "peer_bytes": 2048, "relayed_bytes": 1024}


def test_a_relay_count_that_went_down_draws_no_negative_traffic_and_one_sample_is_a_flat_line():
    samples = [sample(0, 1, 0, 0, 0, 5000), sample(1, 1, 0, 0, 0, 10)]
    assert totals(samples)["relayed_bytes"] == 0
    fleet, _, _ = fleet_plots(samples[:1])
    assert len(points(fleet.lines[0])) == 2
    assert fleet_plots([]) == []


def test_an_accounts_plots_follow_the_fleet_samples_and_draw_no_row_as_none_connected():
    samples = [sample(m, 5, 1, 0, 0, 0) for m in range(4)]
    rows = [  # two browsers at minute 1, busy with 30 tasks; none connected at minute 2; one at minute 3
        {"at": T0 + dt.timedelta(minutes=1), "workers": 2, "busy": 2, "tasks_done": 30},
        {"at": T0 + dt.timedelta(minutes=3), "workers": 1, "busy": 0, "tasks_done": 3},
    ]
    own, tasks = account_plots(samples, rows)
    assert [y for _, y in points(own.lines[0])] == [HEIGHT - 2, 2, HEIGHT - 2, HEIGHT / 2]  # 0, 2, 0, 1 of 2
    assert own.summary == "Your browsers over the last 3 min: now connected 1, busy 0; at most 2"
    assert tasks.lines[0].last == "3.0" and tasks.top == "30"  # tasks a minute
    assert account_plots([], rows) == []
