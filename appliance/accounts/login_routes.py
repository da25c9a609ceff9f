"""Signing in and out, and changing one's password."""

from __future__ import annotations

import datetime as dt

from litestar import Request, get, post
from litestar.datastructures import Cookie
from litestar.di import NamedDependency
from litestar.response import Redirect, Response, Template

from appliance.accounts import sessions, throttle, users
from appliance.accounts.auth import PUBLIC, SESSION_COOKIE, USER, access, client_address
from appliance.accounts.forms import Form, LoginForm, PasswordForm, safe_next
from appliance.config import Settings
from appliance.errors import ServiceError
from appliance.web.rendering import page, redirect

GENERIC_FAILURE = "That email and password do not match an active account."


@get("/login", opt=access(PUBLIC), include_in_schema=False)
async def login_page(request: Request, next: str = "") -> Template | Redirect:
    if request.user is not None and request.user.via == sessions.DASHBOARD:
        return Redirect(path=safe_next(next), status_code=303)
    return page(request, "accounts/login.html", next=safe_next(next) if next else "", email="", error=None)


@post("/login", opt=access(PUBLIC), include_in_schema=False)
async def login(request: Request, data: Form[LoginForm], settings: NamedDependency[Settings]) -> Response:
    email = data.email.strip().lower()
    client = client_address(request)

    def refuse(message: str, status: int) -> Template:
        return page(request, "accounts/login.html", status_code=status, next=data.next, email=email, error=message)

    try:
        await throttle.check(
            email, client, settings.login_max_failures, dt.timedelta(minutes=settings.login_window_minutes)
        )
    except throttle.Throttled as exc:
        return refuse(str(exc), exc.status)
    account = await users.check_credentials(email, data.password) if email and data.password else None
    if account is None:
        await throttle.record_failure(email, client)
        return refuse(GENERIC_FAILURE, 400)
    await throttle.clear(email)
    key = await sessions.start(
        account.id,
        sessions.DASHBOARD,
        dt.timedelta(hours=settings.session_hours),
        user_agent=request.headers.get("user-agent", ""),
        client=client,
    )
    target = "/ui/account/password" if account.must_change_password else safe_next(data.next)
    response = Redirect(path=target, status_code=303)
    response.cookies.append(session_cookie(key, settings))
    return response


def session_cookie(key: str, settings: Settings, name: str = SESSION_COOKIE) -> Cookie:
    return Cookie(
        key=name,
        value=key,
        path="/",
        httponly=True,
        samesite="lax",
        secure=settings.secure_cookies,
        max_age=int(sessions.MAX_AGE.total_seconds()),
    )


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


ROUTES = [login_page, login, logout, password_page, change_password]
