"""What the Billing, Payments and admin Billing pages show, from billing/service.py and the scores.

Read-side helpers only (no business rules): quantities in human units, the usage chart laid out as
server-rendered SVG (the CSP allows no script to draw one), rows of the usage and estimate tables,
the admin's per-account overview, the price form's parsing, a few read queries the service does not
have (which months an account has usage in, a period's statements whether it is closed or not).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from zoneinfo import ZoneInfo

from piccolo.query.functions.aggregate import Count

from appliance.billing import periods, service, settlement, statements
from appliance.billing.ledger import CONSUMER, PROVIDER, RESOURCES, UsageTotal
from appliance.billing.service import ZERO_DECIMAL, format_money
from appliance.billing.statements import StatementInfo
from appliance.billing.tables import UsageEntry

# -- quantities -------------------------------------------------------------------------------

# Binary units, as every other page, the worker page and the Grafana dashboard show bytes (prices stay
# quoted per 10^9 bytes: in_price_units says so).
_BINARY_PREFIXES = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def _number(value: float) -> str:
    """Three significant figures at most, thousands separated: 1.23, 12.3, 123, 1,234."""
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}".rstrip("0").rstrip(".")
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _bytes(value: float, suffix: str = "") -> str:
    for unit, size in _BINARY_PREFIXES:
        if value >= size:
            return f"{_number(value / size)} {unit}{suffix}"
    return f"{_number(value)} B{suffix}"


def _milliseconds(value: float) -> str:
    if value < 1000:
        return f"{_number(value)} ms"
    seconds = value / 1000
    if seconds < 60:
        return f"{_number(seconds)} s"
    if seconds < 3600:
        return f"{_number(seconds / 60)} min"
    return f"{_number(seconds / 3600)} h"


def human_quantity(resource: str, quantity: int | float) -> str:
    """A ledger quantity as a person reads it: ``3.5 h`` of CPU time, ``1.2 GiB`` moved, ``40 GiB·h`` stored."""
    if quantity == 0:
        return "—"
    sign = "-" if quantity < 0 else ""
    value = abs(quantity)
    if resource in ("cpu_ms", "gpu_ms"):
        return sign + _milliseconds(value)
    if resource == "storage_byte_hours":
        return sign + _bytes(value, "·h")
    return sign + _bytes(value)


# The ledger's units, short (statements show the exact quantity beside the human one).
LEDGER_UNITS = {
    "cpu_ms": "ms",
    "gpu_ms": "ms",
    "storage_byte_hours": "byte-hours",
    "p2p_bytes": "bytes",
    "turn_bytes": "bytes",
}


def exact_quantity(resource: str, quantity: int) -> str:
    """``7,200,000 ms``: the ledger's own figure."""
    return f"{quantity:,} {LEDGER_UNITS[resource]}"


def in_price_units(resource: str, quantity: int) -> str:
    """The quantity in the unit prices are quoted per: ``0.0417 CPU-hour``."""
    info = RESOURCES[resource]
    value = Decimal(quantity) / Decimal(info.per)
    if not value:
        text = "0"
    elif abs(value) >= 1:
        text = f"{value:,.2f}".rstrip("0").rstrip(".")
    else:  # four significant figures of a small quantity: 0.0004167
        text = format(float(value), ".4g")
    return f"{text} {info.price_unit}"


def minor_per_major(currency: str) -> int:
    return 1 if currency.lower() in ZERO_DECIMAL else 100


def format_rate(rate: Decimal, currency: str) -> str:
    """A rate (minor units per pricing unit) in the currency's major unit: ``0.05 USD``."""
    major = Decimal(rate) / minor_per_major(currency)
    text = format(major.normalize(), "f")
    if "." in text:
        whole, fraction = text.split(".")
        text = f"{whole}.{fraction.ljust(2, '0')}"
    elif minor_per_major(currency) != 1:
        text += ".00"
    return f"{text} {currency.upper()}"


def month_label(period: str) -> str:
    """``2026-11`` as ``November 2026``."""
    year, month = periods.parse(period)
    return dt.date(year, month, 1).strftime("%B %Y")


# -- the usage and estimate tables --------------------------------------------------------------


@dataclass
class UsageRow:
    resource: str
    label: str
    quantity: int
    human: str
    price_units: str
    price_unit: str
    rates: list[str]  # the rates applied (several when a price changed this month); empty: no price
    amount: int

    @property
    def used(self) -> bool:
        return self.quantity != 0


def usage_rows(usage: dict[str, int], estimate: StatementInfo, prices: dict | None = None) -> list[UsageRow]:
    """One row per resource: what was used, at what rate(s), and the amount (the estimate's lines)."""
    rows = []
    for name, info in RESOURCES.items():
        lines = [line for line in estimate.lines if line.resource == name]
        rates = list(dict.fromkeys(format_rate(line.rate, estimate.currency) for line in lines if line.price_id))
        current = (prices or {}).get(name)
        if not lines and current is not None:
            rate = current.consumer_rate if estimate.kind == CONSUMER else current.provider_rate
            rates = [format_rate(rate, estimate.currency)]
        quantity = usage.get(name, 0)
        rows.append(
            UsageRow(
                name,
                info.label,
                quantity,
                human_quantity(name, quantity),
                in_price_units(name, quantity),
                info.price_unit,
                rates,
                sum(line.amount for line in lines),
            )
        )
    return rows


# -- the usage chart --------------------------------------------------------------------------

CHART_WIDTH = 720
BAND_HEIGHT = 54
BAND_GAP = 30
TOP = 22
AXIS_HEIGHT = 22


@dataclass
class ChartBar:
    x: float
    y: float
    width: float
    height: float
    title: str


@dataclass
class ChartBand:
    resource: str
    label: str
    top: float  # y of the band's top edge
    baseline: float  # y of the band's x axis
    peak: str  # the largest day, in human units ("" when nothing was used)
    total: str
    bars: list[ChartBar] = field(default_factory=list)

    @property
    def label_y(self) -> float:
        return self.top - 8

    @property
    def height(self) -> float:
        return self.baseline - self.top


@dataclass
class UsageChart:
    period: str
    width: int
    height: int
    bands: list[ChartBand]
    ticks: list[tuple[float, str]]  # (x, day-of-month label) along the bottom axis
    days: int
    today_x: float | None = None

    @property
    def empty(self) -> bool:
        return all(not band.bars for band in self.bands)

    @property
    def bar_count(self) -> int:
        return sum(len(band.bars) for band in self.bands)


def month_days(period: str) -> list[dt.date]:
    """Every local day of the period."""
    first, last = periods.days(period)
    return [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]


def usage_chart(period: str, daily: list[tuple[dt.date, dict[str, int]]], today: dt.date | None = None) -> UsageChart:
    """A band per resource, a bar per day (scaled to that resource's busiest day), the whole month wide."""
    days = month_days(period)
    slot = CHART_WIDTH / len(days)
    by_day = dict(daily)
    bands = []
    for index, (name, info) in enumerate(RESOURCES.items()):
        top = TOP + index * (BAND_HEIGHT + BAND_GAP)
        values = [by_day.get(day, {}).get(name, 0) for day in days]
        peak = max(values, default=0)
        band = ChartBand(
            name,
            info.label,
            top,
            top + BAND_HEIGHT,
            human_quantity(name, peak) if peak > 0 else "",
            human_quantity(name, sum(values)),
        )
        for i, (day, value) in enumerate(zip(days, values, strict=True)):
            if value <= 0 or peak <= 0:
                continue
            height = max(BAND_HEIGHT * value / peak, 1.5)  # a small day stays visible
            band.bars.append(
                ChartBar(
                    round(i * slot + slot * 0.15, 2),
                    round(band.baseline - height, 2),
                    round(slot * 0.7, 2),
                    round(height, 2),
                    f"{day.isoformat()}: {human_quantity(name, value)} of {info.label}",
                )
            )
        bands.append(band)
    height = TOP + len(bands) * (BAND_HEIGHT + BAND_GAP) - BAND_GAP + AXIS_HEIGHT
    marks = [1, 5, 10, 15, 20, 25, len(days)]
    ticks = [(round((d - 0.5) * slot, 2), str(d)) for d in dict.fromkeys(marks) if d <= len(days)]
    today_x = None
    if today is not None and today in days:
        today_x = round((days.index(today) + 1) * slot, 2)
    return UsageChart(period, CHART_WIDTH, int(height), bands, ticks, len(days), today_x)


# -- read queries the service does not have ------------------------------------------------------


async def periods_with_usage(tz: ZoneInfo, account: int | None = None, side: str | None = None) -> list[str]:
    """Months with ledger entries (of one account and side, or anyone's), newest first, this month included."""
    query = UsageEntry.select(UsageEntry.period, Count(UsageEntry.id).as_alias("n")).group_by(UsageEntry.period)
    if account is not None:
        query = query.where(UsageEntry.account == account)
    if side is not None:
        query = query.where(UsageEntry.side == side)
    rows = await query
    found = {r["period"] for r in rows} | {service.current_period(tz)}
    return sorted(found, reverse=True)


async def period_statements(period: str, tz: ZoneInfo) -> list[StatementInfo]:
    """Every account's statements of a period: as stored once it closed, as they stand before."""
    if await settlement.is_closed(period):
        return await statements.stored(period)
    return await statements.compute(period, tz)


# -- the admin's overview -------------------------------------------------------------------------


@dataclass
class AccountUsage:
    account: int
    email: str
    role: str
    used: dict[str, str]  # resource -> human quantity (consumer side)
    provided: dict[str, str]  # resource -> human quantity (provider side)
    owes: int
    earns: int


async def accounts_overview(period: str, totals: list[UsageTotal], found: list[StatementInfo]) -> list[AccountUsage]:
    """Per account with usage in the period: what it used and provided, what it owes and earns."""
    from appliance.accounts import users

    people = {a.id: a for a in await users.list_all()}
    rows: dict[int, AccountUsage] = {}

    def row_of(account: int) -> AccountUsage:
        if account not in rows:
            person = people.get(account)
            rows[account] = AccountUsage(
                account,
                person.email if person else f"deleted account {account}",
                person.role if person else "",
                {},
                {},
                0,
                0,
            )
        return rows[account]

    for total in totals:
        target = row_of(total.account).used if total.side == CONSUMER else row_of(total.account).provided
        target[total.resource] = human_quantity(total.resource, total.quantity)
    for s in found:
        if s.kind == CONSUMER:
            row_of(s.account).owes = s.total
        elif s.kind == PROVIDER:
            row_of(s.account).earns = s.total
    return sorted(rows.values(), key=lambda r: r.email)


# -- the price form -------------------------------------------------------------------------------

# At most this many decimals of the currency's major unit in a rate typed on the form.
RATE_DECIMALS = 6
_RATE_RE = re.compile(r"^\d{1,12}(\.\d+)?$")


@dataclass
class PriceInput:
    resource: str
    consumer_rate: Decimal  # minor units per pricing unit, as prices.set_price takes them
    provider_rate: Decimal
    effective_from: dt.date
    currency: str


def parse_rate_field(text: str, currency: str, label: str, errors: dict[str, str], key: str) -> Decimal | None:
    value = text.strip().replace(",", "")
    if not value:
        errors[key] = f"{label}: enter an amount (0 for free)."
        return None
    if not _RATE_RE.match(value):
        errors[key] = f"{label}: a non-negative amount in {currency.upper()}, like 0.05."
        return None
    try:
        major = Decimal(value)
    except InvalidOperation:
        errors[key] = f"{label}: a non-negative amount in {currency.upper()}, like 0.05."
        return None
    if -major.as_tuple().exponent > RATE_DECIMALS:
        errors[key] = f"{label}: at most {RATE_DECIMALS} decimals."
        return None
    return major * minor_per_major(currency)


def parse_price_form(
    resource: str, consumer: str, provider: str, effective: str, currency: str, today: dt.date
) -> tuple[PriceInput | None, dict[str, str]]:
    """The admin's price form, checked field by field; rates are typed in the currency's major unit."""
    errors: dict[str, str] = {}
    if resource not in RESOURCES:
        errors["resource"] = "Choose a resource."
    code = currency.strip().lower()
    if not re.fullmatch(r"[a-z]{3}", code):
        errors["currency"] = "A three-letter currency code, like USD or EUR."
        code = "usd"
    consumer_rate = parse_rate_field(consumer, code, "Coordinator price", errors, "consumer_rate")
    provider_rate = parse_rate_field(provider, code, "Worker payout rate", errors, "provider_rate")
    day = today
    if effective.strip():
        try:
            day = dt.date.fromisoformat(effective.strip())
        except ValueError:
            errors["effective_from"] = "A date like 2026-12-01."
    if (
        consumer_rate is not None
        and provider_rate is not None
        and provider_rate > consumer_rate
        and "provider_rate" not in errors
    ):
        errors["provider_rate"] = "The worker payout rate cannot be above the coordinator price."
    if errors:
        return None, errors
    return PriceInput(resource, consumer_rate, provider_rate, day, code), {}


def rate_in_major(rate: Decimal, currency: str) -> str:
    """A stored rate as the form shows it (major units, no currency)."""
    return format_rate(rate, currency).split(" ")[0]


__all__ = [
    "AccountUsage",
    "ChartBand",
    "ChartBar",
    "PriceInput",
    "UsageChart",
    "UsageRow",
    "accounts_overview",
    "format_money",
    "exact_quantity",
    "format_rate",
    "human_quantity",
    "in_price_units",
    "month_days",
    "month_label",
    "parse_price_form",
    "period_statements",
    "periods_with_usage",
    "rate_in_major",
    "usage_chart",
    "usage_rows",
]
