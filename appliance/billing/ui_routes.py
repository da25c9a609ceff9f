"""The dashboard's Billing (coordinators), Payments (worker accounts) and admin Billing pages.

Everything here reads through billing/service.py (and the read helpers in billing/views.py); the
only writes are the backend's own functions: ``set_price``, ``retry_invoice``/``retry_payout`` and
Stripe Connect onboarding. Forms work without JavaScript (post, then redirect with a flash
message); with htmx the month selector swaps only the usage panel.

Onboarding leaves for Stripe's site. The dashboard's CSP says ``form-action 'self'``, which browsers
also apply to the redirects that follow a form post, so the onboarding form is sent with htmx and
answered with ``HX-Redirect`` (a script navigation); without JavaScript the answer is a page with a
link to Stripe. Stripe sends the browser back to the return URL (the page then asks Stripe whether
onboarding finished) or, when the link expired, to the refresh URL (which makes a new link).
"""

from __future__ import annotations

import datetime as dt

import msgspec
from litestar import Request, get, post
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Response, Template

from appliance.accounts import users
from appliance.accounts.auth import ADMIN, COORDINATOR, USER, access
from appliance.accounts.forms import Form
from appliance.billing import periods, prices, service, settlement, views
from appliance.billing.context import BillingContext
from appliance.billing.ledger import CONSUMER, PROVIDER, RESOURCES
from appliance.billing.service import BillingError, PriceError, StripeUnavailable
from appliance.billing.statements import StatementInfo
from appliance.clock import now
from appliance.config import Settings
from appliance.fleet import reliability
from appliance.web.rendering import is_htmx, page, redirect

BILLING = "/ui/billing"
PAYMENTS = "/ui/payments"
ADMIN_BILLING = "/ui/admin/billing"
STATEMENTS = "/ui/statements"
ONBOARDING_RETURN = f"{PAYMENTS}/onboarding/return"
ONBOARDING_REFRESH = f"{PAYMENTS}/onboarding/refresh"
NOT_CONFIGURED = (
    "Payouts through Stripe are not set up on this appliance: your earnings are shown as statements "
    "and settled another way. Ask your administrator."
)

# Invoice and payout states (settlement.py) as the pages say them.
STATE_LABELS = {
    "pending": "to send",
    "sent": "sent",
    "failed": "failed",
    "nothing-due": "nothing due",
    "offline": "statement only",
    "awaiting-onboarding": "waiting for Stripe onboarding",
}
RETRYABLE = ("failed", "pending", "offline", "awaiting-onboarding")


def _billing(request: Request) -> BillingContext:
    return request.app.state.billing


def _period(request: Request, value: str) -> str:
    """A month from the query string: a valid one no later than this month, else this month."""
    current = service.current_period(_billing(request).tz)
    try:
        period = periods.check(value) if value else current
    except periods.PeriodError:
        return current
    return period if period <= current else current


def _today(request: Request) -> dt.date:
    return periods.local_date(now(), _billing(request).tz)


def _common(request: Request) -> dict:
    return {
        "money": service.format_money,
        "rate": views.format_rate,
        "quantity": views.human_quantity,
        "month": views.month_label,
        "in_units": views.in_price_units,
        "exact": views.exact_quantity,
        "state_label": lambda state: STATE_LABELS.get(state, state),
        "stripe": _billing(request).stripe_enabled,
        "resources": RESOURCES,
    }


# -- coordinator: Billing -------------------------------------------------------------------------


async def _usage_context(request: Request, period: str, side: str) -> dict:
    tz = _billing(request).tz
    account = request.user.user_id
    usage = await service.usage(tz, account, period, side)
    estimate = await service.estimate(tz, account, period, side)
    is_current = period == service.current_period(tz)
    current = await service.current_prices(tz) if is_current else {}
    daily = await service.usage_by_day(tz, account, period, side)
    return {
        "period": period,
        "is_current": is_current,
        "closed": await settlement.is_closed(period),
        "months": await views.periods_with_usage(tz, account, side),
        "rows": views.usage_rows(usage, estimate, current),
        "estimate": estimate,
        "chart": views.usage_chart(period, daily, _today(request)),
        "daily": [(day, values) for day, values in daily if any(values.values())],
        "side": side,
    }


@get(BILLING, opt=access(COORDINATOR), include_in_schema=False)
async def billing_page(request: Request, period: FromQuery[str] = "") -> Template:
    account = request.user.user_id
    usage = await _usage_context(request, _period(request, period), CONSUMER)
    if is_htmx(request) and request.headers.get("hx-target") == "usage":
        return page(request, "billing/_usage.html", usage=usage, base=BILLING, **_common(request))
    earned = await service.estimate(_billing(request).tz, account, kind=PROVIDER)
    return page(
        request,
        "billing/billing.html",
        usage=usage,
        base=BILLING,
        invoices=await service.invoices(account),
        earned=earned,
        has_payouts=bool(await service.payouts(account)),
        **_common(request),
    )


# -- statements (an invoice's or a payout's), for their account and admins -------------------------


async def _statement(request: Request, statement_id: int) -> StatementInfo:
    found = await service.statement(statement_id)
    if found is None or (found.account != request.user.user_id and not request.user.is_admin):
        raise NotFoundException("no such statement")
    return found


async def _statement_context(request: Request, found: StatementInfo) -> dict:
    email = await users.email_of(found.account)
    if found.kind == CONSUMER:
        settled = (await service.invoices(found.account, found.period)) or [None]
    else:
        settled = (await service.payouts(found.account, found.period)) or [None]
    return {
        "statement": found,
        "email": email or f"deleted account {found.account}",
        "settled": settled[0],
        "title": "Invoice statement" if found.kind == CONSUMER else "Payout statement",
        **_common(request),
    }


def _attachment(name: str) -> dict[str, str]:
    return {"content-disposition": f'attachment; filename="{name}"'}


def _statement_name(found: StatementInfo) -> str:
    kind = "invoice" if found.kind == CONSUMER else "payout"
    return f"peermr-{kind}-{found.period}-{found.account}"


@get(f"{STATEMENTS}/{{statement_id:int}}", opt=access(USER), include_in_schema=False)
async def statement_page(request: Request, statement_id: FromPath[int]) -> Template:
    found = await _statement(request, statement_id)
    if found.account != request.user.user_id:
        back = ADMIN_BILLING  # an admin looking at someone's statement
    else:
        back = BILLING if found.kind == CONSUMER else PAYMENTS
    return page(request, "billing/statement.html", back=back, **await _statement_context(request, found))


@get(f"{STATEMENTS}/{{statement_id:int}}/statement.html", opt=access(USER), include_in_schema=False)
async def statement_html(request: Request, statement_id: FromPath[int]) -> Template:
    """The statement as a standalone HTML file (no stylesheet, no script), to keep or send."""
    found = await _statement(request, statement_id)
    response = page(request, "billing/statement_file.html", **await _statement_context(request, found))
    response.headers.update(_attachment(f"{_statement_name(found)}.html"))
    return response


@get(f"{STATEMENTS}/{{statement_id:int}}/statement.csv", opt=access(USER), include_in_schema=False)
async def statement_csv(request: Request, statement_id: FromPath[int]) -> Response:
    found = await _statement(request, statement_id)
    body = await service.statements_csv(found.period, found.account, found=[found])
    return Response(body, media_type="text/csv; charset=utf-8", headers=_attachment(f"{_statement_name(found)}.csv"))


# -- worker accounts: Payments --------------------------------------------------------------------


@get(PAYMENTS, opt=access(USER), include_in_schema=False)
async def payments_page(request: Request, period: FromQuery[str] = "") -> Template:
    account = request.user.user_id
    usage = await _usage_context(request, _period(request, period), PROVIDER)
    if is_htmx(request) and request.headers.get("hx-target") == "usage":
        return page(request, "billing/_usage.html", usage=usage, base=PAYMENTS, **_common(request))
    return page(
        request,
        "billing/payments.html",
        usage=usage,
        base=PAYMENTS,
        connected=await service.connected_account(account),
        payouts=await service.payouts(account),
        browsers=await reliability.scores(account),
        **_common(request),
    )


def _urls(settings: Settings) -> tuple[str, str]:
    base = settings.base_url.rstrip("/")
    return f"{base}{ONBOARDING_RETURN}", f"{base}{ONBOARDING_REFRESH}"


async def _onboarding_url(request: Request, settings: Settings) -> str:
    return_url, refresh_url = _urls(settings)
    return await service.onboarding_link(
        _billing(request).require_gateway(), request.user.user_id, return_url, refresh_url
    )


@post(f"{PAYMENTS}/onboard", opt=access(USER), include_in_schema=False)
async def start_onboarding(request: Request, settings: NamedDependency[Settings]) -> Response:
    if not _billing(request).stripe_enabled:
        return redirect(PAYMENTS, NOT_CONFIGURED, "info")
    try:
        url = await _onboarding_url(request, settings)
    except Exception as exc:  # Stripe refused or could not be reached
        return redirect(PAYMENTS, f"Stripe could not start onboarding: {exc}", "error")
    if is_htmx(request):
        return Response(content="", status_code=200, headers={"HX-Redirect": url})
    return page(request, "billing/onboarding.html", url=url)


@get(ONBOARDING_RETURN, opt=access(USER), include_in_schema=False)
async def onboarding_return(request: Request) -> Redirect:
    """Stripe sends the browser here when the worker left onboarding (finished or not)."""
    if not _billing(request).stripe_enabled:
        return redirect(PAYMENTS, NOT_CONFIGURED, "info")
    try:
        found = await service.refresh_connected_account(_billing(request).require_gateway(), request.user.user_id)
    except Exception as exc:
        return redirect(PAYMENTS, f"Stripe could not be asked about your account: {exc}", "error")
    if found is None:
        return redirect(PAYMENTS, "You have not started Stripe onboarding yet.", "info")
    if found.payouts_enabled:
        return redirect(PAYMENTS, "Stripe onboarding is complete: your earnings are paid out each month.")
    return redirect(PAYMENTS, "Stripe still needs some details before it can pay you out; continue when ready.", "info")


@get(ONBOARDING_REFRESH, opt=access(USER), include_in_schema=False)
async def onboarding_refresh(request: Request, settings: NamedDependency[Settings]) -> Redirect:
    """Stripe sends the browser here when an onboarding link expired: a new link, straight back to Stripe."""
    if not _billing(request).stripe_enabled:
        return redirect(PAYMENTS, NOT_CONFIGURED, "info")
    try:
        url = await _onboarding_url(request, settings)
    except Exception as exc:
        return redirect(PAYMENTS, f"Stripe could not start onboarding: {exc}", "error")
    return Redirect(path=url, status_code=303)


# -- admin: Billing -------------------------------------------------------------------------------


class PriceForm(msgspec.Struct):
    resource: str = ""
    consumer_rate: str = ""
    provider_rate: str = ""
    effective_from: str = ""
    currency: str = ""


async def _admin_context(request: Request, period: str) -> dict:
    tz = _billing(request).tz
    totals = await service.all_usage(tz, period)
    found = await views.period_statements(period, tz)
    people = {a.id: a.email for a in await users.list_all()}
    return {
        "period": period,
        "months": await views.periods_with_usage(tz),
        "currency": await prices.currency_code(),
        "current_prices": await service.current_prices(tz),
        "history": list(reversed(await service.price_history())),
        "accounts": await views.accounts_overview(period, totals, found),
        "closed": await settlement.is_closed(period),
        "invoices": await service.invoices(),
        "payouts": await service.payouts(),
        "emails": people,
        "retryable": RETRYABLE,
        **_common(request),
    }


async def _admin_page(
    request: Request, period: str, *, status_code: int = 200, form: PriceForm | None = None, errors=None
) -> Template:
    context_ = await _admin_context(request, period)
    if form is None:
        form = PriceForm(
            resource="cpu_ms", effective_from=_today(request).isoformat(), currency=context_["currency"].upper()
        )
    return page(
        request,
        "billing/admin.html",
        status_code=status_code,
        form=form,
        errors=errors or {},
        can_set_currency=not context_["history"],
        **context_,
    )


@get(ADMIN_BILLING, opt=access(ADMIN), include_in_schema=False)
async def admin_billing(request: Request, period: FromQuery[str] = "") -> Template:
    return await _admin_page(request, _period(request, period))


@post(f"{ADMIN_BILLING}/prices", opt=access(ADMIN), include_in_schema=False)
async def set_price(request: Request, data: Form[PriceForm]) -> Response:
    currency = data.currency or await prices.currency_code()
    parsed, errors = views.parse_price_form(
        data.resource, data.consumer_rate, data.provider_rate, data.effective_from, currency, _today(request)
    )
    this_month = service.current_period(_billing(request).tz)
    if parsed is None:
        return await _admin_page(request, this_month, status_code=400, form=data, errors=errors)
    try:
        saved = await service.set_price(
            parsed.resource,
            parsed.consumer_rate,
            parsed.provider_rate,
            parsed.effective_from,
            tz=_billing(request).tz,
            currency=parsed.currency,
            by=request.user.user_id,
        )
    except PriceError as exc:
        return await _admin_page(request, this_month, status_code=400, form=data, errors={"form": str(exc)})
    label = RESOURCES[saved.resource].label
    return redirect(ADMIN_BILLING, f"{label}: new price from {saved.effective_from.isoformat()}.")


async def _retry(request: Request, kind: str, item_id: int, retry) -> Redirect:
    try:
        outcome = await retry(_billing(request), item_id)
    except StripeUnavailable as exc:
        return redirect(ADMIN_BILLING, f"Cannot retry {kind} {item_id}: {exc}.", "error")
    except BillingError as exc:
        return redirect(ADMIN_BILLING, str(exc), "error")
    if outcome is True or outcome == "sent":
        return redirect(ADMIN_BILLING, f"The {kind} was sent to Stripe.")
    if outcome == "awaiting-onboarding":
        return redirect(ADMIN_BILLING, f"The {kind} waits for the worker to finish Stripe onboarding.", "info")
    return redirect(ADMIN_BILLING, f"Stripe refused the {kind} again; its error is in the table.", "error")


@post(f"{ADMIN_BILLING}/invoices/{{invoice_id:int}}/retry", opt=access(ADMIN), include_in_schema=False)
async def retry_invoice(request: Request, invoice_id: FromPath[int]) -> Redirect:
    return await _retry(request, "invoice", invoice_id, service.retry_invoice)


@post(f"{ADMIN_BILLING}/payouts/{{payout_id:int}}/retry", opt=access(ADMIN), include_in_schema=False)
async def retry_payout(request: Request, payout_id: FromPath[int]) -> Redirect:
    return await _retry(request, "payout", payout_id, service.retry_payout)


@get(f"{ADMIN_BILLING}/statements.csv", opt=access(ADMIN), include_in_schema=False)
async def export_csv(request: Request, period: FromQuery[str] = "") -> Response:
    """Every account's statements of a month, one row per line: as stored once closed, as they stand before."""
    month = _period(request, period)
    found = await views.period_statements(month, _billing(request).tz)
    body = await service.statements_csv(month, found=found)
    return Response(body, media_type="text/csv; charset=utf-8", headers=_attachment(f"peermr-statements-{month}.csv"))


ROUTES = [
    billing_page,
    statement_page,
    statement_html,
    statement_csv,
    payments_page,
    start_onboarding,
    onboarding_return,
    onboarding_refresh,
    admin_billing,
    set_price,
    retry_invoice,
    retry_payout,
    export_csv,
]
