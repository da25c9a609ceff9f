"""Prices: per resource a coordinator price and a worker payout rate, effective from a local date.

Rates are ``Decimal`` minor currency units (cents for USD) per pricing unit of the resource
(``ledger.RESOURCES[...].price_unit``, e.g. per CPU-hour), kept as text so no float ever touches
them. A new price is a new row; the price of a day is the row with the latest ``effective_from`` on
or before it (the latest set when two share a date). A price may not start inside a period that is
already closed, so changing prices never rewrites a closed month (its statements keep the rates
they were priced with anyway).

Rounding rule (the only one): a statement line's amount is quantity / per × rate, rounded to a
whole minor unit half-to-even (banker's rounding), once per line; a statement's total is the sum
of its lines' amounts.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from zoneinfo import ZoneInfo

import msgspec

from appliance.audit import service as audit
from appliance.billing import ledger, periods
from appliance.billing.tables import Price
from appliance.clock import now
from appliance.errors import InvalidRequest

DEFAULT_CURRENCY = "usd"
CURRENCY_RE = re.compile(r"^[a-z]{3}$")
MAX_RATE = Decimal(10) ** 12


class PriceError(InvalidRequest):
    """A price the appliance does not accept (400); the message says why."""


class PriceInfo(msgspec.Struct, frozen=True):
    id: int
    resource: str
    currency: str
    consumer_rate: Decimal
    provider_rate: Decimal
    effective_from: dt.date
    created_at: dt.datetime


def amount(resource: str, quantity: int, rate: Decimal) -> int:
    """Minor units for ``quantity`` ledger units at ``rate`` per pricing unit: the documented rounding."""
    exact = Decimal(quantity) * rate / Decimal(ledger.RESOURCES[resource].per)
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def parse_rate(value: str | Decimal | int) -> Decimal:
    try:
        rate = Decimal(str(value).strip())
    except InvalidOperation:
        raise PriceError(f"{value!r} is not a number") from None
    if not rate.is_finite() or rate < 0 or rate >= MAX_RATE:
        raise PriceError("a rate is a non-negative number of minor currency units")
    return rate


def _info(row: dict) -> PriceInfo:
    return PriceInfo(
        row["id"],
        row["resource"],
        row["currency"],
        Decimal(row["consumer_rate"]),
        Decimal(row["provider_rate"]),
        row["effective_from"],
        row["created_at"],
    )


async def history(resource: str | None = None) -> list[PriceInfo]:
    """Every price row, oldest first (by effective date, then by when it was set)."""
    query = Price.select()
    if resource is not None:
        query = query.where(Price.resource == resource)
    rows = await query.order_by(Price.effective_from).order_by(Price.id)
    return [_info(r) for r in rows]


async def currency_code() -> str:
    """The currency of the prices (usd until one is set)."""
    latest = await Price.select(Price.currency).order_by(Price.id, ascending=False).first()
    return latest["currency"] if latest else DEFAULT_CURRENCY


def applicable(prices: list[PriceInfo], resource: str, day: dt.date) -> PriceInfo | None:
    """The price of ``resource`` on local date ``day`` among ``prices`` (as ``history`` orders them)."""
    found = None
    for price in prices:
        if price.resource == resource and price.effective_from <= day:
            found = price
    return found


async def current(tz: ZoneInfo, day: dt.date | None = None) -> dict[str, PriceInfo | None]:
    """resource -> the price in force on ``day`` (today in the appliance time zone ``tz`` by default)."""
    day = day or periods.local_date(now(), tz)
    prices = await history()
    return {name: applicable(prices, name, day) for name in ledger.RESOURCES}


async def set_price(
    resource: str,
    consumer_rate: str | Decimal,
    provider_rate: str | Decimal,
    effective_from: dt.date | None = None,
    *,
    tz: ZoneInfo,
    currency: str | None = None,
    by: int | None = None,
) -> PriceInfo:
    """A new price from ``effective_from`` (default today). Refused inside or before a closed period."""
    if resource not in ledger.RESOURCES:
        raise PriceError(f"unknown resource {resource!r}")
    consumer, provider = parse_rate(consumer_rate), parse_rate(provider_rate)
    day = effective_from or periods.local_date(now(), tz)
    closed = await ledger.closed_periods()
    if closed and f"{day.year:04d}-{day.month:02d}" <= max(closed):
        first_open = periods.following(max(closed))
        raise PriceError(f"{max(closed)} is closed: a new price can start in {first_open} at the earliest")
    existing = await currency_code()
    code = (currency or existing).lower()
    if not CURRENCY_RE.match(code):
        raise PriceError(f"{currency!r} is not a currency code like usd")
    if await Price.exists().where(Price.currency != code):
        raise PriceError(f"all prices are in one currency: this appliance's are in {existing.upper()}")
    row = Price(
        resource=resource,
        currency=code,
        consumer_rate=str(consumer),
        provider_rate=str(provider),
        effective_from=day,
        created_at=now(),
        created_by=by,
    )
    await row.save()
    info = _info(row.to_dict())
    before = applicable(await history(resource), resource, day - dt.timedelta(days=1))
    await audit.note(
        "billing.price",
        f"price of {resource} from {day}",
        None if before is None else {"consumer_rate": before.consumer_rate, "provider_rate": before.provider_rate},
        {"consumer_rate": info.consumer_rate, "provider_rate": info.provider_rate, "currency": code},
    )
    return info
