"""What the Workers view shows of each connected browser: a label people can tell apart, its state,
its run and rank, what it did and holds; sorted and filtered as the viewer asks.

Admins see every browser; other accounts see their own, and a coordinator also sees the other
accounts' browsers that would run its runs, without their account or full id (private mode keeps
a run on the coordinator's own browsers).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from appliance.fleet.registry import Worker

SORTS = ("label", "state", "run", "tasks", "score", "blobs", "connected")
STATES = ("idle", "busy", "paused")
_OS = (
    ("Windows", "Windows"),
    ("Android", "Android"),
    ("iPhone", "iOS"),
    ("iPad", "iPadOS"),
    ("CrOS", "ChromeOS"),
    ("Mac OS X", "macOS"),
    ("Macintosh", "macOS"),
    ("Linux", "Linux"),
)


def browser_of(user_agent: str) -> str:
    for marker, name in (
        ("Edg/", "Edge"),
        ("OPR/", "Opera"),
        ("Firefox/", "Firefox"),
        ("Chrome/", "Chrome"),
        ("Safari/", "Safari"),
    ):
        if marker in user_agent:
            version = user_agent.split(marker, 1)[1].split(" ", 1)[0].split(".", 1)[0]
            return f"{name} {version}"
    return user_agent[:40] or "unknown"


def os_of(user_agent: str) -> str:
    return next((name for marker, name in _OS if marker in user_agent), "")


def short_id(worker_id: str) -> str:
    return worker_id[:8]


def _milliseconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.1f} ms" if value < 10 else f"{value:.0f} ms"


@dataclass(frozen=True)
class WorkerRow:
    id: str  # the full id, only for the viewer's own browsers (and admins); "" otherwise
    short_id: str
    account: str
    browser: str
    os: str
    cores: int
    capacity: int  # tasks' Web Workers the tab allows itself (its courtesy share of the cores)
    memory: str
    gpu: str
    visibility: str
    connectivity: str
    rtt: str
    state: str
    pause_reason: str  # why the tab paused itself (battery, pressure, hours), when it did
    run_id: int | None
    place: str  # "A/0": group and rank in its run
    run_visible: bool  # the viewer may open the run
    tasks: int
    score: float
    blobs: int
    bytes: int
    age: int

    @property
    def label(self) -> str:
        system = f" on {self.os}" if self.os else ""
        return f"{self.browser}{system} · {self.account} · {self.short_id}"


def row(
    worker: Worker, placement: tuple[int, str, int] | None, *, own: bool, may_see_run: Callable[[int], bool]
) -> WorkerRow:
    caps = worker.capabilities
    gpu = caps.gpu
    run_id, place = (placement[0], f"{placement[1]}/{placement[2]}") if placement else (worker.run_id, "")
    return WorkerRow(
        id=worker.worker_id if own else "",
        short_id=short_id(worker.worker_id),
        account=worker.account_email if own else "another account",
        browser=browser_of(caps.user_agent),
        os=os_of(caps.user_agent),
        cores=caps.cores,
        capacity=caps.capacity or caps.cores,
        memory=f"{caps.memory_gib:g} GiB" if caps.memory_gib else "—",
        gpu=gpu.label if gpu else "none",
        visibility=caps.visibility,
        connectivity=worker.connectivity or "not probed",
        rtt=_milliseconds(worker.probe_rtt_ms if worker.probe_rtt_ms is not None else worker.rtt_ms),
        state=worker.state,
        pause_reason=worker.pause_reason if worker.paused else "",
        run_id=run_id,
        place=place,
        run_visible=run_id is not None and may_see_run(run_id),
        tasks=worker.tasks_done,
        # Reliability from past runs (fleet/reliability.py); workers are chosen highest first.
        score=round(worker.score, 1),
        # What the tab says it holds; the namenode's PMRFS count until it said so.
        blobs=worker.stored_blobs if worker.stored_blobs is not None else worker.blobs,
        bytes=worker.stored_bytes if worker.stored_blobs is not None else worker.bytes_held,
        age=int(time.time() - worker.connected_at),
    )


@dataclass(frozen=True)
class Query:
    sort: str = "label"
    descending: bool = False
    state: str = ""
    text: str = ""

    @classmethod
    def of(cls, sort: str, order: str, state: str, text: str) -> Query:
        """Unknown values fall back to the defaults (a hand-edited URL still shows the fleet)."""
        return cls(
            sort=sort if sort in SORTS else "label",
            descending=order == "desc",
            state=state if state in STATES else "",
            text=text.strip()[:100],
        )

    def params(self, sort: str | None = None, descending: bool | None = None) -> str:
        """This query as a query string, sorted by ``sort`` in the order given."""
        sort = sort or self.sort
        descending = self.descending if descending is None else descending
        parts = [f"sort={sort}", f"order={'desc' if descending else 'asc'}"]
        if self.state:
            parts.append(f"state={self.state}")
        if self.text:
            parts.append(f"q={quote(self.text)}")
        return "?" + "&".join(parts)

    def link(self, sort: str) -> str:
        """The query string that sorts by ``sort`` (the other way when it already does)."""
        return self.params(sort, not self.descending if sort == self.sort else False)

    def aria_sort(self, sort: str) -> str:
        if sort != self.sort:
            return "none"
        return "descending" if self.descending else "ascending"


_KEYS: dict[str, Callable[[WorkerRow], object]] = {
    "label": lambda r: r.label.lower(),
    "state": lambda r: r.state,
    "run": lambda r: (r.run_id or 0, r.place),
    "tasks": lambda r: r.tasks,
    "score": lambda r: r.score,
    "blobs": lambda r: (r.blobs, r.bytes),
    "connected": lambda r: -r.age,
}


def select(rows: list[WorkerRow], query: Query) -> list[WorkerRow]:
    if query.state:
        rows = [r for r in rows if r.state == query.state]
    if query.text:
        needle = query.text.lower()
        rows = [r for r in rows if needle in r.label.lower() or needle in r.connectivity or needle in r.id.lower()]
    return sorted(rows, key=_KEYS[query.sort], reverse=query.descending)
