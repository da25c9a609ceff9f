"""Signing in and out (with a password, or through the identity provider), and changing one's password."""

from __future__ import annotations

from urllib.parse import quote

from litestar import Request, get, post
from litestar.datastructures import Cookie
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.params import FromQuery
from litestar.response import Redirect, Response, Template

from appliance.accounts import sessions, signin, sso, throttle, users
from appliance.accounts.auth import PUBLIC, SESSION_COOKIE, USER, access, client_address
from appliance.accounts.forms import Form, LoginForm, PasswordForm, safe_next
from appliance.config import Settings
from appliance.errors import ServiceError
from appliance.web.rendering import page, redirect

GENERIC_FAILURE = "That email and password do not match an active account."
# Carries the pending single sign-on (state, nonce, PKCE verifier) from /login/sso to the callback.
SSO_COOKIE = "peermr_sso"


def login_form(
    request: Request,
    settings: Settings,
    *,
    next: str = "",
    email: str = "",
    error: str | None = None,
    status: int = 200,
) -> Template:
    return page(
        request,
        "accounts/login.html",
        status_code=status,
        next=next,
        email=email,
        error=error,
        sso_name=settings.sso_name if settings.sso_issuer else None,
        sso_url="/login/sso" + (f"?next={quote(next, safe='')}" if next else ""),
        password_login=settings.password_login,
    )


@get("/login", opt=access(PUBLIC), include_in_schema=False)
async def login_page(
    request: Request, settings: NamedDependency[Settings], next: FromQuery[str] = ""
) -> Template | Redirect:
    if request.user is not None and request.user.via == sessions.DASHBOARD:
        return Redirect(path=safe_next(next), status_code=303)
    return login_form(request, settings, next=safe_next(next) if next else "")


@post("/login", opt=access(PUBLIC), include_in_schema=False)
async def login(request: Request, data: Form[LoginForm], settings: NamedDependency[Settings]) -> Response:
    email = data.email.strip().lower()
    client = client_address(request)

    async def refuse(message: str, status: int, **detail: object) -> Template:
        await signin.refused(request, email, signin.PASSWORD, message, **detail)
        return login_form(request, settings, next=data.next, email=email, error=message, status=status)

    password_off = f"Password sign-in is turned off here: sign in with {settings.sso_name}."
    if not settings.password_login and email != sso.break_glass_email(settings):
        return await refuse(password_off, 403)
    if not email:
        return login_form(request, settings, next=data.next, error="Enter your email address.", status=400)
    policy = throttle.Policy.of(settings)
    try:
        await throttle.attempt(policy, email, client)
    except throttle.Throttled as exc:
        signin.held(request, email, exc.lockout)
        response = login_form(request, settings, next=data.next, email=email, error=str(exc), status=exc.status)
        response.headers["Retry-After"] = str(exc.retry_after)
        return response
    try:
        account = await users.check_credentials(email, data.password)
    except users.CredentialsRefused as exc:
        lockout, started = await throttle.failed(policy, email, client)
        message = f"{GENERIC_FAILURE} {lockout.advice}" if lockout else GENERIC_FAILURE
        response = await refuse(message, 400, cause=exc.why)
        for each in started:
            await signin.locked(email, each)
        return response
    await throttle.succeeded(email, client)
    if not settings.password_login and not account.is_admin:
        # The break-glass account was demoted (by hand, or by the provider's groups at a single sign-on):
        # its password is no longer a way around single sign-on.
        return await refuse(f"{password_off} {email} may use its password only while it is an admin.", 403)
    return await signin.signed_in(request, account, signin.PASSWORD, settings, data.next)


def _oidc(request: Request) -> sso.OidcClient:
    client = request.app.state.sso
    if client is None:
        raise NotFoundException("Single sign-on is not configured here.")
    return client


@get("/login/sso", opt=access(PUBLIC), include_in_schema=False)
async def sso_start(request: Request, settings: NamedDependency[Settings], next: FromQuery[str] = "") -> Response:
    """Send the browser to the identity provider, remembering (in a signed cookie) how to come back."""
    next_path = safe_next(next) if next else ""
    try:
        url, pending = await _oidc(request).begin(next_path)
    except sso.ProviderError as exc:
        await signin.refused(request, "", signin.SSO, str(exc))
        return login_form(request, settings, next=next_path, error=str(exc), status=exc.status)
    response = Redirect(path=url, status_code=303)
    response.cookies.append(
        Cookie(
            key=SSO_COOKIE,
            value=pending,
            path=sso.CALLBACK_PATH,
            httponly=True,
            # Lax: the provider's redirect back is a top-level GET navigation, which carries it.
            samesite="lax",
            secure=settings.secure_cookies,
            max_age=sso.PENDING_SECONDS,
        )
    )
    return response


@get(sso.CALLBACK_PATH, opt=access(PUBLIC), include_in_schema=False)
async def sso_callback(request: Request, settings: NamedDependency[Settings]) -> Response:
    oidc = _oidc(request)
    params = {k: v for k, v in request.query_params.items() if isinstance(v, str)}
    email, next_path = "", ""
    try:
        identity, pending = await oidc.finish(params, request.cookies.get(SSO_COOKIE))
        email, next_path = identity.email, pending.next
        account = await users.account_from_provider(identity.email, identity.role, identity.new_account_role)
    except ServiceError as exc:
        await signin.refused(request, getattr(exc, "email", "") or email, signin.SSO, str(exc))
        response = login_form(request, settings, next=next_path, error=str(exc), status=exc.status)
    else:
        response = await signin.signed_in(request, account, signin.SSO, settings, next_path)
    response.cookies.append(Cookie(key=SSO_COOKIE, value="", path=sso.CALLBACK_PATH, max_age=0, httponly=True))
    return response


@post("/logout", opt=access(USER, during_password_change=True), include_in_schema=False)
async def logout(request: Request) -> Redirect:
    key = request.cookies.get(SESSION_COOKIE)
    if key:
        await sessions.end(key)
    response = redirect("/login", "You are signed out.", "info")
    response.cookies.append(Cookie(key=SESSION_COOKIE, value="", path="/", max_age=0, httponly=True))
    return response


@get("/ui/account/password", opt=access(USER, during_password_change=True), include_in_schema=False)
async def password_page(request: Request) -> Template:
    return page(request, "accounts/password.html", error=None)


@post("/ui/account/password", opt=access(USER, during_password_change=True), include_in_schema=False)
async def change_password(request: Request, data: Form[PasswordForm]) -> Response:
    principal = request.user
    error = None
    if data.new_password != data.confirm_password:
        error = "The new password and its confirmation differ."
    else:
        try:
            await users.change_password(
                principal.user_id, data.current_password, data.new_password, keep_session_hash=principal.credential_hash
            )
        except ServiceError as exc:
            error = str(exc)
    if error:
        return page(request, "accounts/password.html", status_code=400, error=error)
    return redirect("/ui", "Your password is changed. Your other sessions were signed out.")


ROUTES = [login_page, login, sso_start, sso_callback, logout, password_page, change_password]
