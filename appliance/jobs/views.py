"""What the Jobs and Runs pages show, computed from the jobs service and the coordinator's live state.

Read-side helpers only: no business rules live here. The task timeline of a running run comes from
the coordinator's in-memory execution (attempts so far plus the tasks running now); that of a
finished run from the task rows the coordinator wrote when it ended.
"""

from __future__ import annotations

import datetime as dt
import time
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

import msgspec

from appliance.jobs.execution import INPUT_STAGE
from appliance.jobs.service import RunInfo, StageProgress, TaskInfo
from appliance.jobs.spec import JobSpec
from appliance.jobs.tables import RunLog
from appliance.web.formatting import human_bytes

ACTIVE_STATES = ("queued", "running")
OUTPUT_PAGE_SIZE = 100
# Past this many workers the timeline shows the first ones only (the page stays light at 1 s polls).
TIMELINE_MAX_ROWS = 200
# A bar never gets thinner than this share of the timeline, so short tasks stay visible.
MIN_BAR_PERCENT = 0.4


def stage_name(stage: int, kind: str) -> str:
    return "input function" if stage == INPUT_STAGE else f"stage {stage + 1} ({kind})"


def stages_summary(spec: JobSpec) -> str:
    """``input → map → reduce``: the job's stages at a glance."""
    return " → ".join(["input", *(s.kind for s in spec.stages)])


def is_active(run: RunInfo) -> bool:
    return run.state in ACTIVE_STATES


def run_seconds(run: RunInfo, now: dt.datetime | None = None) -> float | None:
    """How long the run ran (so far, while running); None before it started. Not rounded down: a run
    of 0.9 s did not take 0 s (``duration`` shows short ones to a tenth)."""
    if run.started_at is None:
        return None
    end = run.finished_at or now or dt.datetime.now(dt.UTC)
    return max(0.0, (end - run.started_at).total_seconds())


# -- progress ---------------------------------------------------------------------------------


@dataclass
class StageRow:
    name: str
    total: int
    done: int
    running: int
    emits: int
    bytes: int
    stalled: int = 0
    backups: int = 0
    stage: int = 0  # its index (INPUT_STAGE for the input function): the stage page's address

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else 0


def progress_by_group(progress: list[StageProgress]) -> list[tuple[str, list[StageRow]]]:
    """Per group (A, B, ...), its stages in order with tasks done, running, emits and bytes."""
    groups: dict[str, list[StageRow]] = {}
    for p in sorted(progress, key=lambda p: (p.group, p.stage)):
        groups.setdefault(p.group, []).append(
            StageRow(
                stage_name(p.stage, p.kind), p.total, p.done, p.running, p.emits, p.bytes, p.stalled, p.backups, p.stage
            )
        )
    return list(groups.items())


def progress_fraction(progress: list[StageProgress]) -> float:
    total = sum(p.total for p in progress)
    return sum(p.done for p in progress) / total if total else 0.0


# -- task timeline ----------------------------------------------------------------------------


@dataclass
class Bar:
    left: float  # percent of the timeline
    width: float
    state: str  # done | failed | lost | cancelled | superseded | rejected | running
    title: str


@dataclass
class WorkerRow:
    worker_id: str
    places: list[str] = field(default_factory=list)  # "A/0" for rank 0 of group A
    bars: list[Bar] = field(default_factory=list)
    adapter: str = ""  # its WebGPU adapter ("" without one)

    @property
    def label(self) -> str:
        return self.worker_id[:8] if len(self.worker_id) > 12 else self.worker_id


@dataclass
class Timeline:
    rows: list[WorkerRow]
    seconds: float  # the span the bars are laid out on
    hidden_rows: int = 0

    @property
    def ticks(self) -> list[tuple[float, str]]:
        """Up to five labelled marks along the time axis: (percent, label)."""
        if self.seconds <= 0:
            return [(0.0, "0 s")]
        step = _nice_step(self.seconds / 4)
        marks = []
        t = 0.0
        while t <= self.seconds + 1e-9:
            marks.append((100 * t / self.seconds, _short_seconds(t)))
            t += step
        return marks


@dataclass
class _Span:
    worker_id: str
    group: str
    stage: int
    rank: int
    attempt: int
    state: str
    start: float
    end: float
    emits: int
    bytes: int
    kind: str
    error: str = ""


def _nice_step(raw: float) -> float:
    for step in (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400):
        if raw <= step:
            return step
    return 3600 * 24


def _short_seconds(seconds: float) -> str:
    if seconds < 10 and seconds != int(seconds):
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _title(span: _Span) -> str:
    seconds = max(0.0, span.end - span.start)
    parts = [
        f"{stage_name(span.stage, span.kind)}, group {span.group}, rank {span.rank}, attempt {span.attempt + 1}",
        span.state,
        f"{span.emits} emit{'s' if span.emits != 1 else ''}",
        human_bytes(span.bytes),
        f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.0f} s",
    ]
    if span.error:
        parts.append(span.error[:200])
    return " · ".join(parts)


def _layout(spans: list[_Span], adapters: dict[str, str]) -> Timeline:
    """One row per worker; ``adapters`` names each worker's WebGPU adapter."""
    if not spans:
        return Timeline(rows=[], seconds=0.0)
    origin = min(s.start for s in spans)
    seconds = max(max(s.end for s in spans) - origin, 0.001)
    rows: dict[str, WorkerRow] = {}
    # One row per worker, in the order of the ranks they held (input first), then by first start.
    order: dict[str, tuple] = {}
    for s in spans:
        key = (s.group, s.rank, s.start)
        if s.worker_id not in order or key < order[s.worker_id]:
            order[s.worker_id] = key
    for s in sorted(spans, key=lambda s: s.start):
        row = rows.setdefault(s.worker_id, WorkerRow(s.worker_id, adapter=adapters.get(s.worker_id, "")))
        place = f"{s.group}/{s.rank}"
        if place not in row.places:
            row.places.append(place)
        left = 100 * (s.start - origin) / seconds
        width = max(100 * (s.end - s.start) / seconds, MIN_BAR_PERCENT)
        left = min(left, 100 - MIN_BAR_PERCENT)
        width = min(width, 100 - left)
        row.bars.append(Bar(round(left, 3), round(width, 3), s.state, _title(s)))
    ordered = sorted(rows.values(), key=lambda r: order[r.worker_id])
    return Timeline(
        rows=ordered[:TIMELINE_MAX_ROWS], seconds=seconds, hidden_rows=max(0, len(ordered) - TIMELINE_MAX_ROWS)
    )


def live_timeline(execution, adapters: dict[str, str], clock: float | None = None) -> Timeline:
    """The timeline of a running run: finished attempts so far, and the tasks running now up to
    ``clock``; ``adapters`` names each worker's WebGPU adapter."""
    clock = time.monotonic() if clock is None else clock
    spans = [
        _Span(
            a.worker_id,
            a.group,
            a.stage,
            a.rank,
            a.attempt,
            a.state,
            a.started,
            a.finished,
            a.emits,
            a.bytes,
            execution.kind(a.stage),
            a.error,
        )
        for a in execution.history
    ]
    for task in execution.active:  # backup attempts included
        if task.worker_id:
            spans.append(
                _Span(
                    task.worker_id,
                    task.group,
                    task.stage,
                    task.rank,
                    task.attempt,
                    "running",
                    task.started,
                    max(clock, task.started),
                    task.emits,
                    task.bytes,
                    execution.kind(task.stage),
                )
            )
    return _layout(spans, adapters)


def finished_timeline(tasks: list[TaskInfo], spec: JobSpec) -> Timeline:
    """The timeline of a finished run from its task rows."""
    if not tasks:
        return _layout([], {})
    origin = min(t.started_at for t in tasks)

    def at(value: dt.datetime) -> float:
        return (value - origin).total_seconds()

    def kind(stage: int) -> str:
        if stage == INPUT_STAGE:
            return "input"
        return spec.stages[stage].kind if 0 <= stage < len(spec.stages) else "?"

    spans = [
        _Span(
            t.worker_id,
            t.group,
            t.stage,
            t.rank,
            t.attempt,
            t.state,
            at(t.started_at),
            at(t.finished_at or t.started_at),
            t.emits,
            t.bytes_out,
            kind(t.stage),
            t.error,
        )
        for t in tasks
    ]
    return _layout(spans, {t.worker_id: t.gpu_adapter for t in tasks})


# -- logs -----------------------------------------------------------------------------------


async def log_tail_start(lines, count: int) -> int:
    """The log line id after which the last ``count`` of ``lines`` (service.log_lines_of) begin; 0 for all.

    The run page opens on the end of a long log (the whole log is a download). The caller has
    checked that the run is the actor's (service.log_sources).
    """
    return await _id_before_last(lines, count)


async def log_start_before(lines, line_id: int, count: int) -> int:
    """The log line id after which a view opens to show line ``line_id`` with ``count`` lines before it."""
    return await _id_before_last(lines & (RunLog.id < line_id), count)


async def _id_before_last(lines, count: int) -> int:
    """The id of the line just before the last ``count`` of ``lines``; 0 if there are no more."""
    query = RunLog.select(RunLog.id).where(lines).order_by(RunLog.id, ascending=False)
    row = await query.offset(count).limit(1).first()
    return row["id"] if row else 0


def clock(timezone: str):
    """``14:05:09.123`` in the appliance's time zone: when a log line was written."""
    zone = ZoneInfo(timezone)

    def show(value: dt.datetime) -> str:
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value.astimezone(zone).strftime("%H:%M:%S.%f")[:-3]

    return show


# -- output -----------------------------------------------------------------------------------


def cell(value) -> str:
    """A key or value as the output table shows it: a string as itself, anything else as JSON."""
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


OUTPUT_SORTS = {
    "key": "key, A to Z",
    "-key": "key, Z to A",
    "value": "value, low to high",
    "-value": "value, high to low",
}
# A sorted or searched view reads at most this many records of the group (the downloads have all).
OUTPUT_SCAN_LIMIT = 100_000


@dataclass
class OutputPage:
    group: str
    page: int
    records: list[tuple[str, str]]
    has_next: bool
    # Records of the group (from the run's output index); None when unknown.
    total: int | None = None
    sort: str = ""
    search: str = ""
    # With a search: how many records match; whether the scan stopped at OUTPUT_SCAN_LIMIT.
    matched: int | None = None
    truncated: bool = False

    @property
    def first_index(self) -> int:
        return (self.page - 1) * OUTPUT_PAGE_SIZE + 1

    def query(self, **changes) -> str:
        """The URL query of this view (group, page, sort, search) with ``changes``; empty ones left out."""
        values = {"group": self.group, "page": self.page, "sort": self.sort, "search": self.search, **changes}
        return urllib.parse.urlencode({k: v for k, v in values.items() if v not in ("", None, 1) or k == "group"})

    @property
    def pages(self) -> int | None:
        count = self.matched if self.search else self.total
        return None if count is None else max(1, -(-count // OUTPUT_PAGE_SIZE))


def _order(value) -> tuple:
    """Numbers by value, then strings, then anything else by its JSON."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, value, "")
    if isinstance(value, str):
        return (1, 0, value)
    return (2, 0, cell(value))


async def output_page(
    records: AsyncIterator, group: str, page: int, *, sort: str = "", search: str = "", total: int | None = None
) -> OutputPage:
    """Records ``(page-1)*100 .. page*100`` of a group's output. Unsorted and unsearched, only the
    records up to the page are read; sorted or searched, the first OUTPUT_SCAN_LIMIT are."""
    sort = sort if sort in OUTPUT_SORTS else ""
    if not sort and not search:
        return await _stream_page(records, group, page, total)
    needle = search.lower()
    found: list[tuple[object, object, str, str]] = []
    scanned, truncated = 0, False
    try:
        async for key, value in records:
            if scanned == OUTPUT_SCAN_LIMIT:
                truncated = True
                break
            scanned += 1
            shown = (cell(key), cell(value))
            if not needle or needle in shown[0].lower() or needle in shown[1].lower():
                found.append((key, value, *shown))
    finally:
        await records.aclose()
    if sort:
        field = 0 if sort.endswith("key") else 1
        found.sort(key=lambda r: _order(r[field]), reverse=sort.startswith("-"))
    last_page = max(1, -(-len(found) // OUTPUT_PAGE_SIZE))
    page = min(page, last_page)
    skip = (page - 1) * OUTPUT_PAGE_SIZE
    rows = [(r[2], r[3]) for r in found[skip : skip + OUTPUT_PAGE_SIZE]]
    has_next = skip + OUTPUT_PAGE_SIZE < len(found)
    return OutputPage(group, page, rows, has_next, total, sort, search, len(found) if search else None, truncated)


async def _stream_page(records: AsyncIterator, group: str, page: int, total: int | None) -> OutputPage:
    skip = (page - 1) * OUTPUT_PAGE_SIZE
    rows: list[tuple[str, str]] = []
    has_next = False
    index = 0
    try:
        async for key, value in records:
            if index >= skip + OUTPUT_PAGE_SIZE:
                has_next = True
                break
            if index >= skip:
                rows.append((cell(key), cell(value)))
            index += 1
    finally:
        await records.aclose()
    return OutputPage(group, page, rows, has_next, total)
