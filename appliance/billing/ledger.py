"""The usage ledger: append-only, idempotent per source event, summed per account, resource and period.

Quantities are integers in each resource's smallest unit (``RESOURCES``). Every meter names the
event it reports in ``Entry.source``; the ledger keeps the first row of each source and ignores
later ones, so a meter that retries, or reports the same state twice, never counts twice. A
correction is a new row (with its own source, possibly a negative quantity), never an edit.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal
from zoneinfo import ZoneInfo

import msgspec
from piccolo.query.functions.aggregate import Sum

from appliance.billing import periods
from appliance.billing.tables import ClosedPeriod, UsageEntry
from appliance.clock import now
from appliance.errors import InvalidRequest


class Resource(msgspec.Struct, frozen=True):
    name: str
    label: str
    # The ledger's unit, and the unit prices are quoted per (``per`` ledger units make one).
    unit: str
    price_unit: str
    per: int


RESOURCES: dict[str, Resource] = {
    r.name: r
    for r in (
        Resource("cpu_ms", "CPU", "millisecond of task execution", "CPU-hour", 3_600_000),
        Resource("gpu_ms", "GPU", "millisecond of task execution in a GPU run", "GPU-hour", 3_600_000),
        Resource("storage_byte_hours", "PMRFS storage", "byte-hour", "GB-month (10^9 bytes for 730 h)", 730 * 10**9),
        # A byte moved counts at both ends: the run's account pays for what its browsers sent and received.
        Resource("p2p_bytes", "Peer-to-peer transfer (at each end)", "byte", "GB (10^9 bytes)", 10**9),
        Resource("turn_bytes", "TURN relay", "byte", "GB (10^9 bytes)", 10**9),
    )
}
CONSUMER = "consumer"
PROVIDER = "provider"
SIDES = (CONSUMER, PROVIDER)


class LedgerError(InvalidRequest):
    """An entry the ledger does not accept (400)."""


class Entry(msgspec.Struct, frozen=True):
    account: int
    resource: str
    side: str
    quantity: int
    source: str
    at: dt.datetime
    run: int | None = None


class UsageTotal(msgspec.Struct, frozen=True):
    account: int
    resource: str
    side: str
    quantity: int


def _check(entry: Entry) -> None:
    if entry.resource not in RESOURCES:
        raise LedgerError(f"unknown resource {entry.resource!r}")
    if entry.side not in SIDES:
        raise LedgerError(f"side must be consumer or provider, not {entry.side!r}")
    if not isinstance(entry.quantity, int) or isinstance(entry.quantity, bool):
        raise LedgerError("quantities are integers in the resource's smallest unit")
    if not entry.source or len(entry.source) > 200:
        raise LedgerError("every entry names its source event (at most 200 characters)")
    if entry.at.tzinfo is None:
        raise LedgerError("entry times carry their time zone")


async def closed_periods() -> set[str]:
    return {r["period"] for r in await ClosedPeriod.select(ClosedPeriod.period)}


def period_for(at: dt.datetime, closed: set[str], tz: ZoneInfo) -> str:
    """The period an entry at ``at`` counts in: its own, or the first open one after it when that is closed."""
    period = periods.of(at, tz)
    while period in closed:
        period = periods.following(period)
    return period


async def lock_ledger(shared: bool) -> None:
    """On PostgreSQL, serialise recording against closing a period (SQLite's IMMEDIATE transactions already do)."""
    if UsageEntry._meta.db.engine_type == "postgres":
        function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        await UsageEntry.raw(f"SELECT {function}(7261001)")


async def record(entries: list[Entry], tz: ZoneInfo) -> int:
    """Append entries; a source already in the ledger is skipped. Returns how many rows were added.

    ``tz``: the appliance time zone, whose months are the periods."""
    entries = [e for e in entries if e.quantity != 0]
    for entry in entries:
        _check(entry)
    if not entries:
        return 0
    added = 0
    stamp = now()
    async with UsageEntry._meta.db.transaction():
        await lock_ledger(shared=True)
        closed = await closed_periods()
        for start in range(0, len(entries), 200):
            rows = [
                UsageEntry(
                    source=e.source,
                    account=e.account,
                    resource=e.resource,
                    side=e.side,
                    quantity=e.quantity,
                    run=e.run,
                    at=e.at.astimezone(dt.UTC),
                    period=period_for(e.at, closed, tz),
                    recorded_at=stamp,
                )
                for e in entries[start : start + 200]
            ]
            inserted = (
                await UsageEntry.insert(*rows)
                .on_conflict(target=UsageEntry.source, action="DO NOTHING")
                .returning(UsageEntry.id)
            )
            added += len(inserted)
    return added


async def totals(
    period: str | None = None,
    *,
    account: int | None = None,
    side: str | None = None,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
) -> list[UsageTotal]:
    """Summed quantities per (account, resource, side): of a period, and/or ``start <= at < end``."""
    query = UsageEntry.select(
        UsageEntry.account, UsageEntry.resource, UsageEntry.side, Sum(UsageEntry.quantity).as_alias("quantity")
    ).group_by(UsageEntry.account, UsageEntry.resource, UsageEntry.side)
    if period is not None:
        query = query.where(UsageEntry.period == periods.check(period))
    if account is not None:
        query = query.where(UsageEntry.account == account)
    if side is not None:
        query = query.where(UsageEntry.side == side)
    if start is not None:
        query = query.where(UsageEntry.at >= start)
    if end is not None:
        query = query.where(UsageEntry.at < end)
    rows = await query
    found = [UsageTotal(r["account"], r["resource"], r["side"], int(r["quantity"] or 0)) for r in rows]
    return sorted(found, key=lambda t: (t.account, t.side, list(RESOURCES).index(t.resource)))


async def sums(period: str, account: int, side: str = CONSUMER) -> dict[str, int]:
    """resource -> quantity of one account and side in a period (every resource, zeros included)."""
    found = {t.resource: t.quantity for t in await totals(period, account=account, side=side)}
    return {name: found.get(name, 0) for name in RESOURCES}


async def daily(period: str, account: int, side: str, tz: ZoneInfo) -> list[tuple[dt.date, dict[str, int]]]:
    """Per local day of the period (every day up to today, or the whole month): resource -> quantity."""
    rows = await UsageEntry.select(UsageEntry.resource, UsageEntry.quantity, UsageEntry.at).where(
        (UsageEntry.period == periods.check(period)) & (UsageEntry.account == account) & (UsageEntry.side == side)
    )
    end = periods.bounds(period, tz)[1]
    first = periods.days(period)[0]
    last = periods.local_date(min(end, now()) - dt.timedelta(microseconds=1), tz)
    days: dict[dt.date, dict[str, int]] = defaultdict(lambda: dict.fromkeys(RESOURCES, 0))
    day = first
    while day <= last:
        days[day]  # noqa: B018 - every day of the chart, even without usage
        day += dt.timedelta(days=1)
    for r in rows:
        # Late entries (from before the period) count on its first day.
        day = max(periods.local_date(r["at"], tz), first)
        days[day][r["resource"]] += int(r["quantity"])
    return sorted(days.items())


async def first_period() -> str | None:
    """The period of the oldest entry, if any (where catching up on unclosed months starts)."""
    row = await UsageEntry.select(UsageEntry.period).order_by(UsageEntry.period).first()
    return row["period"] if row else None


def in_price_units(resource: str, quantity: int) -> Decimal:
    return Decimal(quantity) / Decimal(RESOURCES[resource].per)
