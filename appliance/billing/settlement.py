"""The monthly close and settlement: statements, one invoice per coordinator, one payout per worker account.

Closing a period (``close_period``) is one database transaction: the period is marked closed, its
ledger sums are priced into statements (statements.py) and an ``Invoice`` row (consumer statement)
or ``Payout`` row (provider statement) is written for each, with a key unique per account and
period. Entries that arrive for a closed period count in the next open one (ledger.record), so a
closed month never changes.

Settling (``settle``) then sends what is pending to Stripe, step by step, saving each Stripe id as
soon as it exists. Each Stripe call carries an idempotency key derived from the row's key, and before
creating anything the gateway looks for what an interrupted earlier attempt created. So closing twice
changes nothing, and a crash anywhere (even between a Stripe call and the commit that records it)
followed by another run yields exactly one customer, invoice and transfer.

Invoice states: ``pending`` (to send), ``sent`` (finalized in Stripe; ``stripe_status`` follows
Stripe through the webhook), ``failed`` (the error is kept; ``retry_invoice`` sends it again),
``nothing-due`` (a zero total), ``offline`` (Stripe was not configured when the period closed: the
statement is settled another way). Payouts have the same states plus ``awaiting-onboarding`` (the
worker account has no Connect account that can receive payouts yet; paid once it has).
"""

from __future__ import annotations

import datetime as dt
import logging
from zoneinfo import ZoneInfo

import msgspec

from appliance.accounts import users
from appliance.audit import service as audit
from appliance.billing import ledger, meters, periods, statements
from appliance.billing.context import BillingContext
from appliance.billing.ledger import CONSUMER, RESOURCES
from appliance.billing.statements import StatementInfo
from appliance.billing.stripe_gateway import StripeGateway, StripeUnavailable
from appliance.billing.tables import (
    ClosedPeriod,
    ConnectedAccount,
    Invoice,
    Payout,
    Statement,
    StatementLine,
    StripeCustomer,
    UsageEntry,
)
from appliance.clock import now
from appliance.errors import Conflict

log = logging.getLogger(__name__)

PENDING, SENT, FAILED, NOTHING_DUE, OFFLINE, AWAITING = (
    "pending",
    "sent",
    "failed",
    "nothing-due",
    "offline",
    "awaiting-onboarding",
)


class BillingError(Conflict):
    """What the ledger's state does not allow now (409): closing a month that is not over, retrying what was sent."""


def invoice_key(account: int, period: str) -> str:
    return f"peermr-invoice-{account}-{period}"


def payout_key(account: int, period: str) -> str:
    return f"peermr-payout-{account}-{period}"


class CloseResult(msgspec.Struct, frozen=True):
    period: str
    # False when the period was already closed (or for a dry run): nothing was written.
    closed_now: bool
    dry_run: bool
    statements: list[StatementInfo]


# ------------------------------------------------------------------ closing


async def is_closed(period: str) -> bool:
    return await ClosedPeriod.exists().where(ClosedPeriod.period == periods.check(period))


async def close_period(
    billing: BillingContext, period: str, *, dry_run: bool = False, at: dt.datetime | None = None
) -> CloseResult:
    """Close ``period`` (it must be over). Idempotent: a closed period returns its stored statements.
    A dry run of the month under way previews its statements so far."""
    tz = billing.tz
    start, end = periods.bounds(periods.check(period), tz)
    if dry_run and (at or now()) < start:
        raise BillingError(f"{period} has not started yet: there is nothing to preview")
    if not dry_run and (at or now()) < end:
        raise BillingError(f"{period} is not over yet: it can be closed from {end.astimezone(tz)}")
    if await is_closed(period):
        return CloseResult(period, False, dry_run, await statements.stored(period))
    if dry_run:
        extra, _ = await meters.turn_entries(tz)
        closed = await ledger.closed_periods()
        extra = [e for e in extra if ledger.period_for(e.at, closed, tz) == period]
        return CloseResult(period, False, True, await statements.compute(period, tz, extra=extra))
    await meters.sweep_turn(tz)
    async with UsageEntry._meta.db.transaction():
        await ledger.lock_ledger(shared=False)
        if await is_closed(period):
            closed_now = False
        else:
            await ClosedPeriod.insert(ClosedPeriod(period=period, closed_at=now()))
            for draft in await statements.compute(period, tz):
                await _store(draft, billing.stripe_enabled)
            closed_now = True
    log.info("billing period %s %s", period, "closed" if closed_now else "was already closed")
    stored = await statements.stored(period)
    if closed_now:
        await audit.note(
            "billing.closed", f"period {period}", {"closed": False}, {"closed": True, "statements": len(stored)}
        )
    return CloseResult(period, closed_now, False, stored)


async def _store(draft: StatementInfo, stripe_enabled: bool) -> None:
    stamp = now()
    row = Statement(
        slot=f"{draft.kind}:{draft.account}:{draft.period}",
        account=draft.account,
        period=draft.period,
        kind=draft.kind,
        currency=draft.currency,
        total=draft.total,
        created_at=stamp,
    )
    await row.save()
    await StatementLine.insert(
        *(
            StatementLine(
                statement=row.id,
                position=i,
                resource=line.resource,
                quantity=line.quantity,
                rate=str(line.rate),
                price=line.price_id,
                amount=line.amount,
            )
            for i, line in enumerate(draft.lines)
        )
    )
    state = NOTHING_DUE if draft.total <= 0 else PENDING if stripe_enabled else OFFLINE
    common = {
        "statement": row.id,
        "account": draft.account,
        "period": draft.period,
        "amount": draft.total,
        "currency": draft.currency,
        "state": state,
        "updated_at": stamp,
    }
    if draft.kind == CONSUMER:
        await Invoice.insert(Invoice(key=invoice_key(draft.account, draft.period), **common))
    else:
        await Payout.insert(Payout(key=payout_key(draft.account, draft.period), **common))


async def due_periods(tz: ZoneInfo, at: dt.datetime | None = None) -> list[str]:
    """Periods that are over, not closed, and from the first with usage on (months the appliance missed)."""
    first = await ledger.first_period()
    if first is None:
        return []
    closed = await ledger.closed_periods()
    last = periods.preceding(periods.of(at or now(), tz))
    return [p for p in periods.between(first, last) if p not in closed]


async def close_due(billing: BillingContext, at: dt.datetime | None = None) -> list[str]:
    """The monthly job (and the catch-up at start): close every period that is due, then settle."""
    closed = []
    for period in await due_periods(billing.tz, at):
        await close_period(billing, period, at=at)
        closed.append(period)
    await settle(billing)
    return closed


# ------------------------------------------------------------------ settling


class SettleReport(msgspec.Struct):
    invoices_sent: int = 0
    payouts_sent: int = 0
    failed: int = 0
    awaiting_onboarding: int = 0


async def settle(billing: BillingContext, period: str | None = None) -> SettleReport:
    """Send pending invoices and payouts (and payouts waiting for onboarding) to Stripe."""
    report = SettleReport()
    found = billing.gateway
    if found is None:
        return report
    async with billing.settling:
        query = Invoice.select(Invoice.id).where(Invoice.state == PENDING)
        if period is not None:
            query = query.where(Invoice.period == period)
        for row in await query.order_by(Invoice.id):
            if await _send_invoice(found, row["id"]):
                report.invoices_sent += 1
            else:
                report.failed += 1
        query = Payout.select(Payout.id).where(Payout.state.is_in([PENDING, AWAITING]))
        if period is not None:
            query = query.where(Payout.period == period)
        for row in await query.order_by(Payout.id):
            state = await _send_payout(found, row["id"])
            if state == SENT:
                report.payouts_sent += 1
            elif state == AWAITING:
                report.awaiting_onboarding += 1
            else:
                report.failed += 1
    return report


async def _update_invoice(invoice_id: int, **values) -> None:
    values["updated_at"] = now()
    await Invoice.update({getattr(Invoice, k): v for k, v in values.items()}).where(Invoice.id == invoice_id)


async def _update_payout(payout_id: int, **values) -> None:
    values["updated_at"] = now()
    await Payout.update({getattr(Payout, k): v for k, v in values.items()}).where(Payout.id == payout_id)


async def _customer(stripe: StripeGateway, account: int) -> str:
    row = await StripeCustomer.select(StripeCustomer.stripe_id).where(StripeCustomer.account == account).first()
    if row:
        return row["stripe_id"]
    stripe_id = await stripe.customer(account, await users.email_of(account) or "")
    await StripeCustomer.insert(StripeCustomer(account=account, stripe_id=stripe_id, created_at=now())).on_conflict(
        target=StripeCustomer.account, action="DO NOTHING"
    )
    return stripe_id


def _line_description(line: statements.Line) -> str:
    resource = RESOURCES[line.resource]
    return f"{resource.label}: {line.quantity} {resource.unit}(s) at {line.rate} per {resource.price_unit}"


async def _send_invoice(stripe: StripeGateway, invoice_id: int) -> bool:
    row = await Invoice.select().where(Invoice.id == invoice_id).first()
    try:
        customer = row["stripe_customer"] or await _customer(stripe, row["account"])
        if not row["stripe_customer"]:
            await _update_invoice(invoice_id, stripe_customer=customer)
        invoice_ref = row["stripe_invoice"]
        if not invoice_ref:
            found = await stripe.find_invoice(customer, row["key"])
            if found is None:
                found = await stripe.create_invoice(customer, row["key"], row["period"], row["currency"])
            invoice_ref = found.id
            await _update_invoice(invoice_id, stripe_invoice=invoice_ref, stripe_status=found.status or "")
        invoice = await stripe.retrieve_invoice(invoice_ref)
        if invoice.status == "draft":
            statement = await statements.get(row["statement"])
            present = await stripe.invoice_line_keys(invoice_ref)
            for position, line in enumerate(statement.lines):
                line_key = f"{row['key']}:line:{position}"
                if line.amount and line_key not in present:
                    await stripe.add_item(
                        customer, invoice_ref, line_key, line.amount, row["currency"], _line_description(line)
                    )
            invoice = await stripe.finalize(invoice_ref, row["key"])
        await _update_invoice(
            invoice_id,
            state=SENT,
            stripe_status=invoice.status or "",
            hosted_url=getattr(invoice, "hosted_invoice_url", None) or "",
            error="",
            attempts=row["attempts"] + 1,
        )
        return True
    except Exception as exc:  # Stripe refused or could not be reached: kept for a retry
        log.warning("invoice %s could not be sent to Stripe: %s", row["key"], exc)
        await _update_invoice(invoice_id, state=FAILED, error=str(exc)[:2000], attempts=row["attempts"] + 1)
        return False


async def _payable_account(stripe: StripeGateway, account: int) -> str | None:
    """The worker account's connected account id when it can receive transfers (refreshed from Stripe)."""
    row = await ConnectedAccount.select().where(ConnectedAccount.account == account).first()
    if row is None:
        return None
    if not row["payouts_enabled"]:
        info = await refresh_connected_account(stripe, account)
        if info is None or not info.payouts_enabled:
            return None
    return row["stripe_id"]


async def _send_payout(stripe: StripeGateway, payout_id: int) -> str:
    row = await Payout.select().where(Payout.id == payout_id).first()
    state = await _attempt_payout(stripe, payout_id, row)
    await audit.note(
        "billing.payout",
        f"payout #{payout_id} ({row['key']})",
        {"state": row["state"]},
        {"state": state, "amount": row["amount"], "currency": row["currency"]},
    )
    return state


async def _attempt_payout(stripe: StripeGateway, payout_id: int, row: dict) -> str:
    try:
        destination = row["stripe_account"] or await _payable_account(stripe, row["account"])
        if destination is None:
            if row["state"] != AWAITING:
                await _update_payout(payout_id, state=AWAITING)
            return AWAITING
        if not row["stripe_account"]:
            await _update_payout(payout_id, stripe_account=destination)
        transfer = await stripe.find_transfer(destination, row["key"])
        if transfer is None:
            transfer = await stripe.transfer(destination, row["key"], row["amount"], row["currency"], row["period"])
        await _update_payout(payout_id, state=SENT, stripe_transfer=transfer.id, error="", attempts=row["attempts"] + 1)
        return SENT
    except Exception as exc:
        log.warning("payout %s could not be sent to Stripe: %s", row["key"], exc)
        await _update_payout(payout_id, state=FAILED, error=str(exc)[:2000], attempts=row["attempts"] + 1)
        return FAILED


async def retry_invoice(billing: BillingContext, invoice_id: int) -> bool:
    """Send a failed (or offline) invoice again; True when Stripe has it now."""
    stripe = billing.require_gateway()
    async with billing.settling:
        row = await Invoice.select(Invoice.state).where(Invoice.id == invoice_id).first()
        if row is None:
            raise BillingError(f"no invoice {invoice_id}")
        if row["state"] not in (FAILED, OFFLINE, PENDING):
            raise BillingError(f"invoice {invoice_id} is {row['state']}: there is nothing to retry")
        await _update_invoice(invoice_id, state=PENDING)
        return await _send_invoice(stripe, invoice_id)


async def retry_payout(billing: BillingContext, payout_id: int) -> str:
    """Send a failed (or offline, or waiting) payout again; returns its new state."""
    stripe = billing.require_gateway()
    async with billing.settling:
        row = await Payout.select(Payout.state).where(Payout.id == payout_id).first()
        if row is None:
            raise BillingError(f"no payout {payout_id}")
        if row["state"] not in (FAILED, OFFLINE, PENDING, AWAITING):
            raise BillingError(f"payout {payout_id} is {row['state']}: there is nothing to retry")
        await _update_payout(payout_id, state=PENDING)
        return await _send_payout(stripe, payout_id)


# ------------------------------------------------------------------ Connect onboarding


class ConnectedAccountInfo(msgspec.Struct, frozen=True):
    account: int
    stripe_id: str
    details_submitted: bool
    payouts_enabled: bool


async def connected_account(account: int) -> ConnectedAccountInfo | None:
    row = await ConnectedAccount.select().where(ConnectedAccount.account == account).first()
    if row is None:
        return None
    return ConnectedAccountInfo(account, row["stripe_id"], row["details_submitted"], row["payouts_enabled"])


async def onboarding_link(stripe: StripeGateway, account: int, return_url: str, refresh_url: str) -> str:
    """A Stripe-hosted onboarding URL for a worker account (its Express account is created once)."""
    found = await connected_account(account)
    if found is None:
        stripe_id = await stripe.create_connected_account(account, await users.email_of(account) or "")
        await ConnectedAccount.insert(
            ConnectedAccount(account=account, stripe_id=stripe_id, updated_at=now())
        ).on_conflict(target=ConnectedAccount.account, action="DO NOTHING")
        found = await connected_account(account)
    return await stripe.account_link(found.stripe_id, return_url, refresh_url)


async def refresh_connected_account(stripe: StripeGateway, account: int) -> ConnectedAccountInfo | None:
    """Ask Stripe whether the account finished onboarding (the return URL's page calls this too)."""
    row = await ConnectedAccount.select(ConnectedAccount.stripe_id).where(ConnectedAccount.account == account).first()
    if row is None:
        return None
    remote = await stripe.retrieve_account(row["stripe_id"])
    await _set_connected_status(row["stripe_id"], bool(remote.details_submitted), bool(remote.payouts_enabled))
    return await connected_account(account)


async def _set_connected_status(stripe_id: str, details_submitted: bool, payouts_enabled: bool) -> int | None:
    await ConnectedAccount.update(
        {
            ConnectedAccount.details_submitted: details_submitted,
            ConnectedAccount.payouts_enabled: payouts_enabled,
            ConnectedAccount.updated_at: now(),
        }
    ).where(ConnectedAccount.stripe_id == stripe_id)
    row = await ConnectedAccount.select(ConnectedAccount.account).where(ConnectedAccount.stripe_id == stripe_id).first()
    return row["account"] if row else None


# ------------------------------------------------------------------ webhook events


async def apply_event(billing: BillingContext, event) -> str:
    """Update invoice, payout or connected-account status from a verified Stripe event; says what changed."""
    kind = event.get("type", "")
    obj = (event.get("data") or {}).get("object") or {}
    if not isinstance(obj, dict) or not obj.get("id"):
        return "ignored"
    if kind.startswith("invoice."):
        key = (obj.get("metadata") or {}).get("peermr_key", "")
        updated = (
            await Invoice.update(
                {
                    Invoice.stripe_status: obj.get("status") or "",
                    Invoice.hosted_url: obj.get("hosted_invoice_url") or "",
                    Invoice.updated_at: now(),
                }
            )
            .where((Invoice.stripe_invoice == obj["id"]) | (Invoice.key == key))
            .returning(Invoice.key)
        )
        return f"invoice {updated[0]['key']}: {obj.get('status')}" if updated else "no such invoice"
    if kind.startswith("transfer."):
        status = "reversed" if obj.get("reversed") or obj.get("amount_reversed") else "transferred"
        updated = (
            await Payout.update({Payout.stripe_status: status, Payout.updated_at: now()})
            .where((Payout.stripe_transfer == obj["id"]) | (Payout.key == (obj.get("transfer_group") or "")))
            .returning(Payout.key)
        )
        return f"payout {updated[0]['key']}: {status}" if updated else "no such payout"
    if kind == "account.updated":
        account = await _set_connected_status(
            obj["id"], bool(obj.get("details_submitted")), bool(obj.get("payouts_enabled"))
        )
        if account is not None and obj.get("payouts_enabled"):
            billing.background.spawn(_settle_quietly(billing))
        return f"connected account {obj['id']}: payouts {'enabled' if obj.get('payouts_enabled') else 'not enabled'}"
    return "ignored"


async def _settle_quietly(billing: BillingContext) -> None:
    try:
        await settle(billing)
    except Exception:
        log.exception("settling after an onboarding failed")


__all__ = [
    "BillingError",
    "CloseResult",
    "ConnectedAccountInfo",
    "SettleReport",
    "StripeUnavailable",
    "apply_event",
    "close_due",
    "close_period",
    "connected_account",
    "due_periods",
    "invoice_key",
    "is_closed",
    "onboarding_link",
    "payout_key",
    "refresh_connected_account",
    "retry_invoice",
    "retry_payout",
    "settle",
]
