"""Rendering helpers shared by every dashboard page: layout context, flash messages, redirects."""

from __future__ import annotations

import base64
import json
from typing import Any

from litestar import Request
from litestar.datastructures import Cookie
from litestar.response import Redirect, Template

from appliance.web.navigation import nav_for

FLASH_COOKIE = "peermr_flash"
LEVELS = {"info", "success", "warning", "error"}


def _encode(messages: list[tuple[str, str]]) -> str:
    return base64.urlsafe_b64encode(json.dumps(messages).encode()).decode()


def _decode(raw: str | None) -> list[tuple[str, str]]:
    if not raw:
        return []
    try:
        data = json.loads(base64.urlsafe_b64decode(raw.encode()))
        return [(str(level), str(text)) for level, text in data if level in LEVELS][:5]
    except (ValueError, TypeError):
        return []


def is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def page(request: Request, template: str, *, status_code: int = 200, **context: Any) -> Template:
    """A full page (or, for htmx, a partial) with the layout's context and pending flash messages."""
    flashes = _decode(request.cookies.get(FLASH_COOKIE))
    principal = request.scope.get("user")
    response = Template(
        template_name=template,
        status_code=status_code,
        context={
            "principal": principal,
            "nav": nav_for(principal),
            "current_path": request.url.path,
            "flashes": flashes,
            **context,
        },
    )
    if flashes:
        response.cookies.append(Cookie(key=FLASH_COOKIE, value="", max_age=0, path="/", httponly=True))
    return response


def redirect(path: str, message: str | None = None, level: str = "success") -> Redirect:
    """Post/redirect/get, with a message shown once on the next page."""
    response = Redirect(path=path, status_code=303)
    if message:
        response.cookies.append(
            Cookie(key=FLASH_COOKIE, value=_encode([(level, message)]), path="/", httponly=True, samesite="lax")
        )
    return response
