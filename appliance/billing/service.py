"""What the Billing, Payments and admin Billing pages (and the CLI) call: plain structs, never table rows.

Usage and estimates of the open month come straight from the ledger priced with today's prices;
closed months come from their stored statements. Money is in integer minor units of ``currency``.
``tz`` is the appliance time zone (``BillingContext.tz``), whose months are the periods.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from zoneinfo import ZoneInfo

import msgspec

from appliance.billing import ledger, periods, prices, settlement, statements
from appliance.billing.ledger import CONSUMER, PROVIDER, RESOURCES, Resource, UsageTotal
from appliance.billing.prices import PriceError, PriceInfo, set_price
from appliance.billing.settlement import (
    BillingError,
    ConnectedAccountInfo,
    close_period,
    connected_account,
    onboarding_link,
    refresh_connected_account,
    retry_invoice,
    retry_payout,
)
from appliance.billing.statements import Line, StatementInfo
from appliance.billing.stripe_gateway import StripeUnavailable
from appliance.billing.tables import Invoice, Payout
from appliance.clock import now

__all__ = [
    "CONSUMER",
    "PROVIDER",
    "RESOURCES",
    "BillingError",
    "ConnectedAccountInfo",
    "InvoiceInfo",
    "Line",
    "PayoutInfo",
    "PriceError",
    "PriceInfo",
    "Resource",
    "StatementInfo",
    "StripeUnavailable",
    "UsageTotal",
    "all_usage",
    "close_period",
    "connected_account",
    "current_period",
    "current_prices",
    "estimate",
    "format_money",
    "invoices",
    "onboarding_link",
    "payouts",
    "price_history",
    "refresh_connected_account",
    "retry_invoice",
    "retry_payout",
    "set_price",
    "statement",
    "statements_csv",
    "statements_of",
    "usage",
    "usage_by_day",
]


# Currencies whose minor unit is the unit itself (Stripe's zero-decimal currencies).
ZERO_DECIMAL = {
    "bif",
    "clp",
    "djf",
    "gnf",
    "jpy",
    "kmf",
    "krw",
    "mga",
    "pyg",
    "rwf",
    "ugx",
    "vnd",
    "vuv",
    "xaf",
    "xof",
    "xpf",
}


def format_money(amount: int, currency: str) -> str:
    """Minor units as a person reads them: ``format_money(123456, "usd") == "1,234.56 USD"``."""
    if currency.lower() in ZERO_DECIMAL:
        return f"{amount:,} {currency.upper()}"
    sign = "-" if amount < 0 else ""
    return f"{sign}{abs(amount) // 100:,}.{abs(amount) % 100:02d} {currency.upper()}"


def current_period(tz: ZoneInfo) -> str:
    """This month in the appliance time zone ("YYYY-MM")."""
    return periods.of(now(), tz)


async def usage(tz: ZoneInfo, account: int, period: str | None = None, side: str = CONSUMER) -> dict[str, int]:
    """resource -> quantity (ledger units) an account used (consumer) or provided (provider) in a period."""
    return await ledger.sums(period or current_period(tz), account, side)


async def usage_by_day(
    tz: ZoneInfo, account: int, period: str | None = None, side: str = CONSUMER
) -> list[tuple[dt.date, dict[str, int]]]:
    """The chart's data: per local day of the period (up to today), resource -> quantity."""
    return await ledger.daily(period or current_period(tz), account, side, tz)


async def all_usage(tz: ZoneInfo, period: str | None = None) -> list[UsageTotal]:
    """Every account's totals per resource and side in a period (the admin's view)."""
    return await ledger.totals(period or current_period(tz))


async def estimate(tz: ZoneInfo, account: int, period: str | None = None, kind: str = CONSUMER) -> StatementInfo:
    """The account's statement for a period as it stands: the bill so far (consumer) or earnings (provider).

    For a closed period this is the stored statement."""
    period = period or current_period(tz)
    if await settlement.is_closed(period):
        found = await statements.stored(period, account=account, kind=kind)
    else:
        found = [s for s in await statements.compute(period, tz, account=account) if s.kind == kind]
    if found:
        return found[0]
    return StatementInfo(account, period, kind, await prices.currency_code(), [], 0)


async def statements_of(
    account: int | None = None, period: str | None = None, kind: str | None = None
) -> list[StatementInfo]:
    """Stored statements of closed periods, newest period first (``account=None``: everyone's)."""
    return await statements.stored(period, account=account, kind=kind)


async def statement(statement_id: int) -> StatementInfo | None:
    return await statements.get(statement_id)


async def current_prices(tz: ZoneInfo) -> dict[str, PriceInfo | None]:
    return await prices.current(tz)


async def price_history(resource: str | None = None) -> list[PriceInfo]:
    return await prices.history(resource)


class InvoiceInfo(msgspec.Struct, frozen=True):
    id: int
    key: str
    statement_id: int
    account: int
    period: str
    amount: int
    currency: str
    state: str
    stripe_invoice: str
    stripe_status: str
    hosted_url: str
    error: str
    attempts: int
    updated_at: dt.datetime


class PayoutInfo(msgspec.Struct, frozen=True):
    id: int
    key: str
    statement_id: int
    account: int
    period: str
    amount: int
    currency: str
    state: str
    stripe_account: str
    stripe_transfer: str
    stripe_status: str
    error: str
    attempts: int
    updated_at: dt.datetime


# The columns of each table in the order of its Info's fields.
_INVOICE_COLUMNS = (
    "id",
    "key",
    "statement",
    "account",
    "period",
    "amount",
    "currency",
    "state",
    "stripe_invoice",
    "stripe_status",
    "hosted_url",
    "error",
    "attempts",
    "updated_at",
)
_PAYOUT_COLUMNS = (
    "id",
    "key",
    "statement",
    "account",
    "period",
    "amount",
    "currency",
    "state",
    "stripe_account",
    "stripe_transfer",
    "stripe_status",
    "error",
    "attempts",
    "updated_at",
)


async def _settlements(table, columns: tuple[str, ...], info, account: int | None, period: str | None) -> list:
    """Invoices or payouts, newest period first, optionally of one account or period."""
    query = table.select(*(getattr(table, name) for name in columns))
    if account is not None:
        query = query.where(table.account == account)
    if period is not None:
        query = query.where(table.period == period)
    rows = await query.order_by(table.period, ascending=False).order_by(table.account)
    return [info(*(r[name] for name in columns)) for r in rows]


async def invoices(account: int | None = None, period: str | None = None) -> list[InvoiceInfo]:
    return await _settlements(Invoice, _INVOICE_COLUMNS, InvoiceInfo, account, period)


async def payouts(account: int | None = None, period: str | None = None) -> list[PayoutInfo]:
    return await _settlements(Payout, _PAYOUT_COLUMNS, PayoutInfo, account, period)


CSV_COLUMNS = [
    "period",
    "account",
    "email",
    "kind",
    "resource",
    "quantity",
    "unit",
    "rate",
    "per",
    "amount",
    "currency",
    "statement_total",
    "state",
]


async def statements_csv(
    period: str | None = None, account: int | None = None, found: list[StatementInfo] | None = None
) -> str:
    """Statements as CSV, one row per line (a statement without lines gets one row); amounts in minor units.

    ``found`` exports the given statements (a dry run's); otherwise the stored ones of ``period``/``account``."""
    from appliance.accounts import users

    found = found if found is not None else await statements.stored(period, account=account)
    emails = await users.emails(s.account for s in found)
    states = {}
    for info in await invoices(account, period):
        states[(CONSUMER, info.account, info.period)] = info.state
    for info in await payouts(account, period):
        states[(PROVIDER, info.account, info.period)] = info.state
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for s in found:
        state = states.get((s.kind, s.account, s.period), "" if s.id is None else "closed")
        for line in s.lines or [None]:
            resource = RESOURCES[line.resource] if line else None
            writer.writerow(
                [
                    s.period,
                    s.account,
                    emails.get(s.account, ""),
                    "invoice" if s.kind == CONSUMER else "payout",
                    line.resource if line else "",
                    line.quantity if line else 0,
                    resource.unit if resource else "",
                    str(line.rate) if line else "",
                    resource.price_unit if resource else "",
                    line.amount if line else 0,
                    s.currency,
                    s.total,
                    state,
                ]
            )
    return out.getvalue()
