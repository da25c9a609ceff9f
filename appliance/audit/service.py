"""The audit log's service: record an action, read and export entries, verify and prune the chain.

Services call ``note`` where an action takes effect (the actor and address come from the request or
command, context.py); code that knows better (a sign-in names the account signing in) calls
``record``. Entries are only ever appended; pruning removes the oldest ones past the admin's
retention and keeps the digest of the last one removed as the chain's new anchor.
"""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import io
import logging
from collections.abc import AsyncIterator

import msgspec

from appliance.audit import chain
from appliance.audit.context import current
from appliance.audit.tables import AuditChain, AuditEntry
from appliance.clock import now
from appliance.errors import InvalidRequest

log = logging.getLogger(__name__)

PAGE_SIZE = 200
# The CSV export reads and sends this many entries at a time, so any number of them fits in memory.
EXPORT_BATCH = 1000
# Appends from this process take turns (the transaction serialises other processes on SQLite).
_append_lock = asyncio.Lock()


class Entry(msgspec.Struct, frozen=True):
    id: int
    at: dt.datetime
    actor: str
    action: str
    target: str
    address: str
    before: str
    after: str


async def _chain_row() -> dict:
    row = await AuditChain.select().first()
    if row is None:
        await AuditChain.insert(AuditChain())
        row = await AuditChain.select().first()
    return row


async def record(
    actor: str | None,
    action: str,
    target: str,
    before: object = None,
    after: object = None,
    address: str | None = None,
) -> None:
    """Append one entry. ``actor`` and ``address`` None: whoever is acting now (context.py)."""
    acting = current()
    row = {
        "at": now(),
        "actor": (acting.actor if actor is None else actor)[:320],
        "action": action[:64],
        "target": target[:400],
        "address": (acting.address if address is None else address)[:64],
        "before": chain.canonical(before),
        "after": chain.canonical(after),
    }
    async with _append_lock, AuditEntry._meta.db.transaction():
        ends = await _chain_row()
        row["prev_digest"] = ends["head_digest"]
        row["digest"] = chain.digest(row["prev_digest"], row)
        inserted = await AuditEntry.insert(AuditEntry(**row)).returning(AuditEntry.id)
        await AuditChain.update(
            {AuditChain.head_digest: row["digest"], AuditChain.head_id: inserted[0]["id"]}, force=True
        )


async def note(action: str, target: str, before: object = None, after: object = None) -> None:
    """Record an action of whoever is acting now."""
    await record(None, action, target, before, after)


class Filters(msgspec.Struct, frozen=True):
    actor: str = ""
    action: str = ""
    target: str = ""
    since: str = ""  # YYYY-MM-DD, UTC
    until: str = ""  # YYYY-MM-DD inclusive


def _day(text: str, name: str) -> dt.datetime | None:
    if not text.strip():
        return None
    try:
        return dt.datetime.combine(dt.date.fromisoformat(text.strip()), dt.time(), dt.UTC)
    except ValueError:
        raise InvalidRequest(f"{name} must be a date like 2026-11-25, not {text!r}.") from None


def _query(query, filters: Filters):
    if filters.actor.strip():
        query = query.where(AuditEntry.actor.ilike(f"%{filters.actor.strip()}%"))
    if filters.action.strip():
        query = query.where(AuditEntry.action.ilike(f"{filters.action.strip()}%"))
    if filters.target.strip():
        query = query.where(AuditEntry.target.ilike(f"%{filters.target.strip()}%"))
    if (since := _day(filters.since, "From")) is not None:
        query = query.where(AuditEntry.at >= since)
    if (until := _day(filters.until, "To")) is not None:
        query = query.where(AuditEntry.at < until + dt.timedelta(days=1))
    return query


_COLUMNS = (
    AuditEntry.id,
    AuditEntry.at,
    AuditEntry.actor,
    AuditEntry.action,
    AuditEntry.target,
    AuditEntry.address,
    AuditEntry.before,
    AuditEntry.after,
)


async def entries(filters: Filters, limit: int = PAGE_SIZE) -> list[Entry]:
    """The newest entries matching the filters, newest first."""
    rows = await _query(AuditEntry.select(*_COLUMNS), filters).order_by(AuditEntry.id, ascending=False).limit(limit)
    return [Entry(**r) for r in rows]


async def actions() -> list[str]:
    rows = await AuditEntry.select(AuditEntry.action).distinct().order_by(AuditEntry.action)
    return [r["action"] for r in rows]


def _as_text(cell: str) -> str:
    """A cell a spreadsheet would take for a formula (a failed sign-in's email is anyone's text) gets a
    leading apostrophe, so it shows as text."""
    return "'" + cell if cell[:1] in ("=", "+", "-", "@", "\t", "\r") else cell


def export_csv(filters: Filters) -> AsyncIterator[str]:
    """Every matching entry up to the newest now, oldest first, as CSV (times in UTC), a batch at a time."""
    _query(AuditEntry.select(), filters)  # a malformed date is refused now, before the first line is sent
    return _csv_batches(filters)


async def _csv_batches(filters: Filters) -> AsyncIterator[str]:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["id", "at_utc", "actor", "action", "target", "address", "before", "after"])
    last, newest = 0, (await _chain_row())["head_id"]
    while True:
        rows = (
            await _query(AuditEntry.select(*_COLUMNS), filters)
            .where((AuditEntry.id > last) & (AuditEntry.id <= newest))
            .order_by(AuditEntry.id)
            .limit(EXPORT_BATCH)
        )
        for row in rows:
            texts = [row["actor"], row["action"], row["target"], row["address"], row["before"], row["after"]]
            writer.writerow([row["id"], chain.stamp(row["at"]), *map(_as_text, texts)])
        yield out.getvalue()
        out.seek(0)
        out.truncate()
        if len(rows) < EXPORT_BATCH:
            return
        last = rows[-1]["id"]


async def verify() -> chain.Verdict:
    ends = await _chain_row()
    rows = await AuditEntry.select().order_by(AuditEntry.id)
    return chain.verify(rows, ends["anchor_digest"], ends["head_digest"], ends["head_id"])


async def chain_state() -> dict:
    """The chain's ends: head digest and id, anchor digest, how many entries were pruned, the retention."""
    return await _chain_row()


async def set_retention(text: str) -> int | None:
    """The admin's retention in days (empty: keep every entry); returns what is stored."""
    text = text.strip()
    days = None
    if text:
        try:
            days = int(text)
        except ValueError:
            raise InvalidRequest(f"The retention must be a whole number of days, not {text!r}.") from None
        if days < 1:
            raise InvalidRequest("The retention must be at least 1 day (or empty to keep every entry).")
    before = (await _chain_row())["retention_days"]
    await AuditChain.update({AuditChain.retention_days: days}, force=True)
    await note("audit.retention", "audit log", {"retention_days": before}, {"retention_days": days})
    return days


async def prune(at: dt.datetime | None = None) -> int:
    """Remove entries older than the retention; the last removed digest becomes the anchor."""
    ends = await _chain_row()
    days = ends["retention_days"]
    if days is None:
        return 0
    cutoff = (at or now()) - dt.timedelta(days=days)
    async with _append_lock, AuditEntry._meta.db.transaction():
        # Never the newest entry: the chain keeps at least its head.
        old = (
            await AuditEntry.select(AuditEntry.id, AuditEntry.digest)
            .where((AuditEntry.at < cutoff) & (AuditEntry.id < ends["head_id"]))
            .order_by(AuditEntry.id, ascending=False)
            .first()
        )
        if old is None:
            return 0
        removed = await AuditEntry.delete().where(AuditEntry.id <= old["id"]).returning(AuditEntry.id)
        await AuditChain.update(
            {AuditChain.anchor_digest: old["digest"], AuditChain.pruned: AuditChain.pruned + len(removed)}, force=True
        )
    log.info("audit log: pruned %d entries older than %d days", len(removed), days)
    await note("audit.pruned", "audit log", None, {"removed": len(removed), "through_entry": old["id"]})
    return len(removed)
