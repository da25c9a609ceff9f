"""Admin pages: accounts (and their sign-in lockouts) and enrolment links."""

from __future__ import annotations

import datetime as dt

from litestar import Request, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath
from litestar.response import Redirect, Response, Template

from appliance.accounts import enrolment, throttle, users
from appliance.accounts.auth import ADMIN, access
from appliance.accounts.forms import (
    ActiveForm,
    EnrolmentForm,
    Form,
    LockoutForm,
    NewAccountForm,
    RoleForm,
)
from appliance.accounts.tables import Role
from appliance.accounts.users import AccountError
from appliance.config import Settings
from appliance.errors import ServiceError
from appliance.web.errors import refusal
from appliance.web.rendering import is_htmx, page, redirect

ROLES = [r.value for r in Role]
VALIDITY_CHOICES = [(1, "1 hour"), (24, "1 day"), (168, "7 days"), (720, "30 days"), (8760, "1 year")]


@get("/ui/admin", opt=access(ADMIN), include_in_schema=False)
async def admin_home() -> Redirect:
    return Redirect(path="/ui/admin/accounts", status_code=303)


async def _accounts_page(
    request: Request, settings: Settings, *, status_code: int = 200, error: str | None = None, created=None, form=None
):
    return page(
        request,
        "accounts/admin/accounts.html",
        status_code=status_code,
        accounts=await users.list_all(),
        roles=ROLES,
        lockouts=await throttle.lockouts(throttle.Policy.of(settings)),
        error=error,
        created=created,
        form=form or NewAccountForm(),
    )


@get("/ui/admin/accounts", opt=access(ADMIN), include_in_schema=False)
async def accounts_page(request: Request, settings: NamedDependency[Settings]) -> Template:
    return await _accounts_page(request, settings)


@post("/ui/admin/accounts", opt=access(ADMIN), include_in_schema=False)
async def create_account(request: Request, data: Form[NewAccountForm], settings: NamedDependency[Settings]) -> Template:
    try:
        account, generated = await users.create_user(data.email, data.role, data.password or None)
    except ServiceError as exc:
        return await _accounts_page(request, settings, status_code=400, error=str(exc), form=data)
    return await _accounts_page(request, settings, created={"account": account, "password": generated})


async def _row_or_redirect(request: Request, account: users.Account, message: str, *, password: str | None = None):
    if is_htmx(request):
        return page(request, "accounts/admin/_account_row.html", account=account, roles=ROLES, new_password=password)
    if password:
        return page(request, "accounts/admin/password_reset.html", account=account, new_password=password)
    return redirect("/ui/admin/accounts", message)


async def _refused(request: Request, user_id: int, exc: ServiceError) -> Response:
    """A refused change: htmx gets the account's row as it is (its target) with the message out of
    band, so the row stays; a plain post goes back to the list with the message."""
    account = await users.get(user_id)
    if not is_htmx(request) or account is None:
        return refusal(request, exc, "/ui/admin/accounts")
    return page(
        request, "accounts/admin/_account_row.html", account=account, roles=ROLES, oob_flashes=[("error", str(exc))]
    )


@post("/ui/admin/accounts/{user_id:int}/role", opt=access(ADMIN), include_in_schema=False)
async def change_role(request: Request, user_id: FromPath[int], data: Form[RoleForm]) -> Response:
    try:
        account = await users.set_role(user_id, data.role)
    except ServiceError as exc:
        return await _refused(request, user_id, exc)
    return await _row_or_redirect(request, account, f"{account.email} is now {account.role}.")


@post("/ui/admin/accounts/{user_id:int}/active", opt=access(ADMIN), include_in_schema=False)
async def change_active(request: Request, user_id: FromPath[int], data: Form[ActiveForm]) -> Response:
    try:
        account = await users.set_active(user_id, data.active == "true")
    except ServiceError as exc:
        return await _refused(request, user_id, exc)
    state = "enabled" if account.active else "disabled and signed out"
    return await _row_or_redirect(request, account, f"{account.email} is {state}.")


@post("/ui/admin/accounts/{user_id:int}/reset-password", opt=access(ADMIN), include_in_schema=False)
async def reset_password(request: Request, user_id: FromPath[int]) -> Response:
    try:
        account, password = await users.reset_password(user_id)
    except ServiceError as exc:
        return await _refused(request, user_id, exc)
    return await _row_or_redirect(request, account, "", password=password)


@post("/ui/admin/lockouts/clear", opt=access(ADMIN), include_in_schema=False)
async def clear_lockout(request: Request, data: Form[LockoutForm], settings: NamedDependency[Settings]) -> Response:
    """The failures behind one lockout are forgotten: that email (or every email) may try again from that address."""
    policy = throttle.Policy.of(settings)
    try:
        lockout = await throttle.clear(policy, data.email.strip().lower(), data.address.strip())
    except ServiceError as exc:
        level, message = "error", str(exc)
    else:
        level, message = "success", f"The lockout of {lockout.target} is cleared."
    if not is_htmx(request):
        return redirect("/ui/admin/accounts", message, level)
    return page(
        request,
        "accounts/admin/_lockouts.html",
        lockouts=await throttle.lockouts(policy),
        oob_flashes=[(level, message)],
    )


async def _enrolment_page(request: Request, settings: Settings, *, status_code=200, error=None, created=None):
    return page(
        request,
        "accounts/admin/enrolment.html",
        status_code=status_code,
        links=await enrolment.list_all(),
        # Worker accounts first: they are what enrolment links are usually for.
        accounts=sorted((a for a in await users.list_all() if a.active), key=lambda a: (a.role != "worker", a.email)),
        validity_choices=VALIDITY_CHOICES,
        error=error,
        created=created,
        base_url=settings.base_url,
    )


@get("/ui/admin/enrolment", opt=access(ADMIN), include_in_schema=False)
async def enrolment_page(request: Request, settings: NamedDependency[Settings]) -> Template:
    return await _enrolment_page(request, settings)


def _parse_int(value: str, what: str, *, optional: bool = False) -> int | None:
    value = value.strip()
    if not value and optional:
        return None
    try:
        return int(value)
    except ValueError:
        raise AccountError(f"{what} must be a whole number.") from None


@post("/ui/admin/enrolment", opt=access(ADMIN), include_in_schema=False)
async def create_enrolment(
    request: Request, data: Form[EnrolmentForm], settings: NamedDependency[Settings]
) -> Template:
    try:
        link, token = await enrolment.create(
            account_id=_parse_int(data.account_id, "The account"),
            created_by=request.user.user_id,
            label=data.label,
            lifetime=dt.timedelta(hours=_parse_int(data.valid_hours, "The validity")),
            max_uses=_parse_int(data.max_uses, "The number of uses", optional=True),
        )
    except ServiceError as exc:
        return await _enrolment_page(request, settings, status_code=400, error=str(exc))
    return await _enrolment_page(request, settings, created={"link": link, "url": f"{settings.base_url}/enrol/{token}"})


@post("/ui/admin/enrolment/{link_id:int}/revoke", opt=access(ADMIN), include_in_schema=False)
async def revoke_enrolment(request: Request, link_id: FromPath[int]) -> Response:
    try:
        link = await enrolment.revoke(link_id)
    except ServiceError as exc:
        return redirect("/ui/admin/enrolment", str(exc), "error")
    if is_htmx(request):
        return page(request, "accounts/admin/_link_row.html", link=link)
    return redirect("/ui/admin/enrolment", f"Enrolment link “{link.label}” is revoked.")


ROUTES = [
    admin_home,
    accounts_page,
    create_account,
    change_role,
    change_active,
    reset_password,
    clear_lockout,
    enrolment_page,
    create_enrolment,
    revoke_enrolment,
]
