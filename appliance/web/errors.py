"""Error responses: JSON for the API, pages for people, a sign-in redirect for the anonymous.

A domain's refusal (a ServiceError) is mapped here once for every route: the API answers JSON with
its status, message and ``extra``; a page answers the 404 or 403 page, or the message. A page that
shows a refusal in place of its own (a form shown again with the message) catches it itself;
``refusal`` is the one way to show it as a flash message.
"""

from __future__ import annotations

import logging
from urllib.parse import quote

from litestar import MediaType, Request, Response
from litestar.exceptions import (
    HTTPException,
    NotAuthorizedException,
    NotFoundException,
    PermissionDeniedException,
)
from litestar.response import Redirect
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from appliance.accounts.auth import API_PREFIX, PasswordChangeRequired
from appliance.errors import ServiceError, TooManyRequests
from appliance.web.rendering import is_htmx, page, redirect

log = logging.getLogger(__name__)

CSRF_FAILURE = "CSRF token verification failed"
# What the worker page's script fetches: it reads a 401 (its cookie is no longer valid), not a sign-in page.
WORKER_JSON_PATHS = ("/worker/ice-servers",)


def _wants_json(request: Request) -> bool:
    path = request.url.path
    return path.startswith((API_PREFIX, "/schema")) or path in ("/healthz", "/metrics")


def _json(status: int, detail: str, headers: dict | None = None) -> Response:
    return Response(
        {"status_code": status, "detail": detail}, status_code=status, media_type=MediaType.JSON, headers=headers
    )


def _to_login(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    location = f"/login?next={quote(target, safe='')}"
    if is_htmx(request):
        return Response(content="", status_code=401, headers={"HX-Redirect": location})
    return Redirect(path=location, status_code=303)


def not_authorized(request: Request, exc: NotAuthorizedException) -> Response:
    if _wants_json(request):
        return _json(
            401, "A valid API token is required (Authorization: Bearer <token>).", {"WWW-Authenticate": "Bearer"}
        )
    if request.url.path in WORKER_JSON_PATHS:
        return _json(401, "This browser's sign-in is not valid (revoked, expired or signed out).")
    return _to_login(request)


def forbidden(request: Request, exc: PermissionDeniedException) -> Response:
    detail = exc.detail
    if detail == CSRF_FAILURE:
        detail = "This form has expired or came from another site. Go back, reload the page and try again."
    if _wants_json(request):
        return _json(403, detail)
    return page(request, "errors/refused.html", status_code=403, title="Not allowed", detail=detail)


def not_found(request: Request, exc: NotFoundException) -> Response:
    if _wants_json(request):
        return _json(404, exc.detail or "Not found.")
    return page(request, "errors/404.html", status_code=404)


def http_error(request: Request, exc: HTTPException) -> Response:
    if exc.status_code == 429 and not _wants_json(request):
        # A rate limit met by a dashboard form: the message where the page shows messages.
        response = service_error(request, TooManyRequests(exc.detail))
        response.headers.update(exc.headers or {})
        return response
    if _wants_json(request) or exc.status_code < 500:
        return Response(
            {"status_code": exc.status_code, "detail": exc.detail, **({"extra": exc.extra} if exc.extra else {})},
            status_code=exc.status_code,
            media_type=MediaType.JSON,
            headers=exc.headers,
        )
    return server_error(request, exc)


def password_change_required(request: Request, exc: PasswordChangeRequired) -> Response:
    location = "/ui/account/password"
    if is_htmx(request):
        return Response(content="", status_code=403, headers={"HX-Redirect": location})
    return Redirect(path=location, status_code=303)


def refusal(request: Request, exc: ServiceError, back: str) -> Response:
    """A refusal as a flash message: htmx gets it where the page shows messages (200, since htmx does
    not swap error responses); a plain form post is sent back to ``back`` with it."""
    if is_htmx(request):
        return page(request, "_flash_oob.html", flashes=[("error", str(exc))])
    return redirect(back, str(exc), "error")


def service_error(request: Request, exc: ServiceError) -> Response:
    """A refusal no route showed itself: JSON for the API, else the 404 or 403 page, or the message."""
    if _wants_json(request):
        return http_error(request, HTTPException(status_code=exc.status, detail=str(exc), extra=exc.extra))
    if exc.status == 404:
        return not_found(request, NotFoundException(str(exc)))
    if exc.status == 403:
        return forbidden(request, PermissionDeniedException(str(exc)))
    if is_htmx(request):
        return page(request, "_flash_oob.html", flashes=[("error", str(exc))])
    return page(request, "errors/refused.html", status_code=exc.status, title="Not possible", detail=str(exc))


def server_error(request: Request, exc: Exception) -> Response:
    log.exception("error serving %s %s", request.method, request.url.path, exc_info=exc)
    if _wants_json(request):
        return _json(500, "Internal server error. The appliance's log has the details.")
    return page(request, "errors/500.html", status_code=HTTP_500_INTERNAL_SERVER_ERROR)


EXCEPTION_HANDLERS = {
    NotAuthorizedException: not_authorized,
    PermissionDeniedException: forbidden,
    NotFoundException: not_found,
    PasswordChangeRequired: password_change_required,
    HTTPException: http_error,
    ServiceError: service_error,
    Exception: server_error,
}
