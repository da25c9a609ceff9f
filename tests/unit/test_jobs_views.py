"""Read helpers of the Jobs and Runs pages: output pages, cells, the task timeline's layout."""

from __future__ import annotations

import datetime as dt

import pytest

from appliance.jobs import views
from appliance.jobs.service import RunInfo, StageProgress, TaskInfo
from appliance.jobs.spec import JobSpec, StageSpec
from appliance.web.formatting import human_duration


async def records(count: int, closed: list):
    try:
        for i in range(count):
            yield (f"k{i}", {"n": i})
    finally:
        closed.append(True)


@pytest.mark.parametrize(
    "count,page,first,last,has_next",
    [
        (0, 1, None, None, False),
        (100, 1, "k0", "k99", False),
        (101, 1, "k0", "k99", True),
        (250, 3, "k200", "k249", False),
    ],
)
async def test_output_pages_of_a_hundred_records(count, page, first, last, has_next):
    closed: list = []
    result = await views.output_page(records(count, closed), "A", page)
    assert result.has_next is has_next
    assert (result.records[0][0] if result.records else None) == first
    assert (result.records[-1][0] if result.records else None) == last
    assert result.first_index == (page - 1) * 100 + 1
    assert closed == [True]  # the reader is closed, also when the page ended early


async def listed(items):
    for item in items:
        yield item


async def test_sorted_output_orders_numbers_by_value_and_pages_the_whole_group():
    items = [(f"w{i}", (i * 37) % 250) for i in range(250)] + [("text", "abc"), ("none", None)]
    high = await views.output_page(listed(items), "A", 1, sort="-value", total=252)
    assert [v for _, v in high.records[:3]] == ["null", "abc", "249"]  # others, then strings, then numbers
    assert (high.pages, high.has_next) == (3, True)
    low = await views.output_page(listed(items), "A", 3, sort="value")
    assert [v for _, v in low.records] == ["200", *map(str, range(201, 250)), "abc", "null"]
    by_key = await views.output_page(listed(items), "A", 1, sort="key")
    assert [k for k, _ in by_key.records[:4]] == ["none", "text", "w0", "w1"]


async def test_searched_output_counts_matches_and_a_page_past_them_shows_the_last():
    items = [("alpha", 1), ("beta", 2), ("ALPHABET", 3), ("gamma", {"alp": 4})]
    found = await views.output_page(listed(items), "A", 9, search="Alp")
    assert found.records == [("alpha", "1"), ("ALPHABET", "3"), ("gamma", '{"alp":4}')]
    assert (found.matched, found.page, found.pages, found.truncated) == (3, 1, 1, False)
    # An unknown sort is no sort: the records in the order the workers wrote them.
    plain = await views.output_page(listed(items), "A", 1, sort="bogus")
    assert [k for k, _ in plain.records] == ["alpha", "beta", "ALPHABET", "gamma"]


def test_cells_show_strings_as_themselves_and_the_rest_as_json():
    assert views.cell("a b") == "a b"
    assert views.cell(3) == "3" and views.cell(1.5) == "1.5" and views.cell(None) == "null"
    assert views.cell({"n": [1, "x"]}) == '{"n":[1,"x"]}'


def spec() -> JobSpec:
    return JobSpec(stages=[StageSpec(kind="map", source="x"), StageSpec(kind="reduce", source="y")], worker_count=2)


def test_finished_timeline_has_a_row_per_worker_and_bars_by_time():
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def task(worker, stage, rank, start, end, state="done", attempt=0):
        return TaskInfo(
            "A", stage, rank, attempt, worker, state, t0 + dt.timedelta(seconds=start),
            t0 + dt.timedelta(seconds=end), 5, 100, 1, "boom" if state == "failed" else "",
        )  # fmt: skip

    tasks = [
        task("w0", -1, 0, 0, 2),
        task("w1", 0, 1, 2, 4, "failed"),
        task("w0", 0, 0, 2, 6),
        task("w2", 0, 1, 5, 8, attempt=1),
        task("w0", 1, 0, 8, 10),
    ]
    timeline = views.finished_timeline(tasks, spec())
    assert [row.worker_id for row in timeline.rows] == ["w0", "w1", "w2"]
    assert timeline.seconds == 10
    w0 = timeline.rows[0]
    assert w0.places == ["A/0"] and [b.left for b in w0.bars] == [0, 20, 80]
    assert [b.width for b in w0.bars] == [20, 40, 20]
    failed = timeline.rows[1].bars[0]
    assert failed.state == "failed" and "stage 1 (map), group A, rank 1, attempt 1" in failed.title
    assert "boom" in failed.title
    assert "attempt 2" in timeline.rows[2].bars[0].title
    assert "input function" in w0.bars[0].title and "stage 2 (reduce)" in w0.bars[2].title
    assert timeline.ticks[0] == (0.0, "0 s") and timeline.ticks[-1][0] <= 100


def test_an_empty_timeline_and_progress_by_group():
    assert views.finished_timeline([], spec()).rows == []
    progress = [
        StageProgress("B", -1, "input", 1, 1, 0, 3, 10),
        StageProgress("A", 0, "map", 2, 1, 1, 7, 20),
        StageProgress("A", -1, "input", 1, 1, 0, 3, 10),
    ]
    groups = views.progress_by_group(progress)
    assert [g for g, _ in groups] == ["A", "B"]
    assert [(r.name, r.percent) for r in groups[0][1]] == [("input function", 100), ("stage 1 (map)", 50)]
    assert views.progress_fraction(progress) == 0.75


@pytest.mark.parametrize(
    "took,shown",
    [(0.9, "0.9 s"), (1.24, "1.2 s"), (0.01, "0.1 s"), (3.0, "3 s"), (45.7, "45 s"), (754, "12 min")]
    + [(11_100, "3 h 05 min")],
)
def test_a_run_that_took_under_a_second_does_not_read_as_0_s(took, shown):
    started = dt.datetime(2026, 11, 27, 12, tzinfo=dt.UTC)
    run = RunInfo(
        id=1,
        job_id=1,
        job_name="quick",
        owner="carol@example.com",
        state="succeeded",
        reason="",
        queued_at=started,
        started_at=started,
        finished_at=started + dt.timedelta(seconds=took),
        spec=JobSpec(stages=[]),
    )
    assert human_duration(views.run_seconds(run)) == shown
