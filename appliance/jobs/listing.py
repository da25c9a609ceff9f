"""The Runs and Jobs lists as queries: filters, a search and pages, all carried in the URL.

A coordinator lists their own runs and jobs; an admin everyone's, and may narrow them to one owner.
Bad filter values are not errors: an unknown state or a job id that is not a number reads as "any",
a page past the end shows the last one, so a link someone edited by hand still shows a list.
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Mapping

import msgspec
from piccolo.columns.combination import And, Or, Where, WhereRaw
from piccolo.columns.operators.comparison import ILike, Like

from appliance.accounts import users
from appliance.accounts.actor import Actor
from appliance.jobs.tables import Job, Run

PAGE_SIZE = 25
RUN_STATES = ("queued", "running", "succeeded", "failed", "cancelled")
# The Jobs list filters by the state of each job's last run, or "never" for jobs not run yet.
NEVER_RUN = "never"
JOB_STATES = (*RUN_STATES, NEVER_RUN)


class Filters(msgspec.Struct, frozen=True):
    """What a list shows: state (a run's, or a job's last run's), owner id (admins only), job id (runs
    only), search text, page."""

    state: str = ""
    owner: int | None = None
    job: int | None = None
    q: str = ""
    page: int = 1

    @classmethod
    def read(cls, actor: Actor, params: Mapping[str, str], states: tuple[str, ...] = RUN_STATES) -> Filters:
        """The filters of a list's URL query (``state``, ``owner``, ``job``, ``q``, ``page``); ``states``
        are the states the list knows."""

        def whole(name: str) -> int | None:
            text = params.get(name, "").strip()
            return int(text) if text.isdigit() else None

        state = params.get("state", "")
        return cls(
            state=state if state in states else "",
            owner=whole("owner") if actor.is_admin else None,
            job=whole("job"),
            q=params.get("q", "").strip()[:200],
            page=max(1, whole("page") or 1),
        )

    def query(self, **changes) -> str:
        """This list's URL query, with ``changes`` (a new page, say); empty filters left out."""
        values = {**msgspec.structs.asdict(self), **changes}
        kept = {k: v for k, v in values.items() if v not in ("", None) and not (k == "page" and v == 1)}
        return urllib.parse.urlencode(kept)

    @property
    def narrowed(self) -> bool:
        return bool(self.state or self.owner or self.job or self.q)


class Page(msgspec.Struct, frozen=True):
    rows: list[dict]
    total: int
    page: int
    pages: int

    @property
    def first(self) -> int:
        return (self.page - 1) * PAGE_SIZE + 1 if self.rows else 0

    @property
    def last(self) -> int:
        return self.first + len(self.rows) - 1 if self.rows else 0


def contains(column, text: str) -> Where:
    # Case-insensitive: ILIKE on PostgreSQL, LIKE on SQLite (which is, for ASCII). LIKE's own
    # wildcards in the search text only widen the match: nothing is hidden by them.
    operator = Like if column._meta.engine_type == "sqlite" else ILike
    return Where(column=column, value=f"%{text}%", operator=operator)


def _all(conditions: list):
    combined = conditions[0]
    for c in conditions[1:]:
        combined = And(combined, c)
    return combined


async def _page(table, conditions: list, filters: Filters, order) -> Page:
    count = table.count()
    if conditions:
        count = count.where(_all(conditions))
    total = await count
    pages = max(1, math.ceil(total / PAGE_SIZE))
    page = min(filters.page, pages)
    query = table.select().order_by(order, ascending=False).offset((page - 1) * PAGE_SIZE).limit(PAGE_SIZE)
    if conditions:
        query = query.where(_all(conditions))
    return Page(rows=await query, total=total, page=page, pages=pages)


def _owned(table, actor: Actor, filters: Filters) -> list:
    """A coordinator's own rows; an admin's choice of owner, or everyone's."""
    if not actor.is_admin:
        return [table.owner == actor.user_id]
    return [] if filters.owner is None else [table.owner == filters.owner]


async def runs(actor: Actor, filters: Filters) -> Page:
    """A page of runs, newest first. The search matches the job's name, the reason, or a run id (``12`` or ``#12``)."""
    conditions = _owned(Run, actor, filters)
    if filters.state:
        conditions.append(Run.state == filters.state)
    if filters.job is not None:
        conditions.append(Run.job == filters.job)
    if filters.q:
        text = filters.q.removeprefix("#")
        search = Or(contains(Run.job_name, filters.q), contains(Run.reason, filters.q))
        conditions.append(Or(search, Run.id == int(text)) if text.isdigit() else search)
    return await _page(Run, conditions, filters, Run.id)


def _last_run(actor: Actor, state: str) -> WhereRaw:
    """Jobs whose last run (the actor's own, unless an admin: as the list shows it) is in ``state``,
    or that have none."""
    job, run = Job._meta.tablename, Run._meta.tablename
    runs = f"FROM {run} r WHERE r.job = {job}.id" + ("" if actor.is_admin else " AND r.owner = {}")
    mine = () if actor.is_admin else (actor.user_id,)
    if state == NEVER_RUN:
        return WhereRaw(f"NOT EXISTS (SELECT 1 {runs})", *mine)
    return WhereRaw(f"(SELECT r.state {runs} ORDER BY r.id DESC LIMIT 1) = {{}}", *mine, state)


async def jobs(actor: Actor, filters: Filters) -> Page:
    """A page of jobs, the last changed first; the search matches the name, the state that of the last run."""
    conditions = _owned(Job, actor, filters)
    if filters.q:
        conditions.append(contains(Job.name, filters.q))
    if filters.state:
        conditions.append(_last_run(actor, filters.state))
    return await _page(Job, conditions, filters, Job.updated_at)


async def owners(actor: Actor, table) -> list[tuple[int, str]]:
    """The accounts owning rows of ``table`` (Run or Job), for an admin's owner filter: (id, email)."""
    if not actor.is_admin:
        return []
    ids = [r["owner"] for r in await table.select(table.owner).distinct()]
    emails = await users.emails(ids)
    return sorted(emails.items(), key=lambda item: item[1])


async def job_choices(actor: Actor) -> list[tuple[int, str]]:
    """The jobs the actor may filter runs by: (id, name), by name."""
    query = Job.select(Job.id, Job.name).order_by(Job.name)
    if not actor.is_admin:
        query = query.where(Job.owner == actor.user_id)
    return [(r["id"], r["name"]) for r in await query]
