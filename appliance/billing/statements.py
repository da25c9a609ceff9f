"""Statements: a period's ledger sums priced, one per account and side.

A consumer statement says what an account owes for the period (it becomes its invoice), a provider
statement what its browsers earned (its payout). A line is one resource at one price: a period in
which a price changed has a line per price in force. Amounts follow the rounding rule in
prices.py (half-to-even per line); the total is the sum of the lines.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal
from itertools import pairwise
from zoneinfo import ZoneInfo

import msgspec

from appliance.billing import ledger, periods, prices
from appliance.billing.ledger import CONSUMER, RESOURCES, Entry
from appliance.billing.prices import PriceInfo
from appliance.billing.tables import Statement, StatementLine


class Line(msgspec.Struct, frozen=True):
    resource: str
    quantity: int
    rate: Decimal
    amount: int
    price_id: int | None = None

    @property
    def label(self) -> str:
        return RESOURCES[self.resource].label

    @property
    def price_unit(self) -> str:
        return RESOURCES[self.resource].price_unit


class StatementInfo(msgspec.Struct, frozen=True):
    account: int
    period: str
    # consumer (owes: an invoice) | provider (earned: a payout)
    kind: str
    currency: str
    lines: list[Line]
    total: int
    id: int | None = None
    created_at: dt.datetime | None = None


def _price_edges(
    period: str, history: list[PriceInfo], tz: ZoneInfo
) -> list[tuple[dt.datetime | None, dt.datetime | None, dt.date]]:
    """The period cut where a price starts inside it: (from, to, local day whose prices apply)."""
    first_day, last_day = periods.days(period)
    cuts = sorted({p.effective_from for p in history if first_day < p.effective_from <= last_day})
    edges: list[dt.datetime | None] = [None, *(periods.day_start(d, tz) for d in cuts), None]
    days = [first_day, *cuts]
    return [(lo, hi, day) for (lo, hi), day in zip(pairwise(edges), days, strict=True)]


async def compute(
    period: str, tz: ZoneInfo, *, account: int | None = None, extra: list[Entry] | None = None
) -> list[StatementInfo]:
    """Statements of ``period`` from the ledger as it is now (plus ``extra`` entries not recorded yet)."""
    history = await prices.history()
    currency = await prices.currency_code()
    sums: dict[tuple[int, str, str, int | None], int] = defaultdict(int)
    rates: dict[int | None, PriceInfo | None] = {None: None}
    for lo, hi, day in _price_edges(period, history, tz):
        for total in await ledger.totals(period, account=account, start=lo, end=hi):
            price = prices.applicable(history, total.resource, day)
            rates[price.id if price else None] = price
            sums[(total.account, total.side, total.resource, price.id if price else None)] += total.quantity
        for entry in extra or []:
            at = entry.at
            if (account is None or entry.account == account) and (lo is None or at >= lo) and (hi is None or at < hi):
                price = prices.applicable(history, entry.resource, day)
                rates[price.id if price else None] = price
                sums[(entry.account, entry.side, entry.resource, price.id if price else None)] += entry.quantity
    lines: dict[tuple[int, str], list[Line]] = defaultdict(list)
    order = list(RESOURCES)
    for (acct, side, resource, price_id), quantity in sorted(
        sums.items(), key=lambda kv: (kv[0][0], kv[0][1], order.index(kv[0][2]), kv[0][3] or 0)
    ):
        if quantity == 0:
            continue
        price = rates[price_id]
        rate = Decimal(0) if price is None else price.consumer_rate if side == CONSUMER else price.provider_rate
        lines[(acct, side)].append(Line(resource, quantity, rate, prices.amount(resource, quantity, rate), price_id))
    return [
        StatementInfo(acct, period, side, currency, found, sum(line.amount for line in found))
        for (acct, side), found in sorted(lines.items())
    ]


async def stored(
    period: str | None = None, *, account: int | None = None, kind: str | None = None
) -> list[StatementInfo]:
    """Statements of closed periods as they were written when the period closed."""
    query = Statement.select()
    if period is not None:
        query = query.where(Statement.period == periods.check(period))
    if account is not None:
        query = query.where(Statement.account == account)
    if kind is not None:
        query = query.where(Statement.kind == kind)
    rows = await query.order_by(Statement.period, ascending=False).order_by(Statement.account).order_by(Statement.kind)
    if not rows:
        return []
    line_rows = await StatementLine.select().where(StatementLine.statement.is_in([r["id"] for r in rows]))
    by_statement: dict[int, list[dict]] = defaultdict(list)
    for line in sorted(line_rows, key=lambda r: r["position"]):
        by_statement[line["statement"]].append(line)
    return [
        StatementInfo(
            r["account"],
            r["period"],
            r["kind"],
            r["currency"],
            [
                Line(line["resource"], line["quantity"], Decimal(line["rate"]), line["amount"], line["price"])
                for line in by_statement[r["id"]]
            ],
            r["total"],
            r["id"],
            r["created_at"],
        )
        for r in rows
    ]


async def get(statement_id: int) -> StatementInfo | None:
    row = (
        await Statement.select(Statement.period, Statement.account, Statement.kind)
        .where(Statement.id == statement_id)
        .first()
    )
    if row is None:
        return None
    found = await stored(row["period"], account=row["account"], kind=row["kind"])
    return found[0] if found else None
