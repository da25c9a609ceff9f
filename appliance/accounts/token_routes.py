"""Each user's own API tokens."""

from __future__ import annotations

from litestar import Request, get, post
from litestar.params import FromPath
from litestar.response import Response, Template

from appliance.accounts import api_tokens
from appliance.accounts.auth import USER, access
from appliance.accounts.forms import Form, TokenForm
from appliance.errors import ServiceError
from appliance.web.rendering import is_htmx, page, redirect


async def _render(request: Request, *, status_code: int = 200, new_token: str | None = None, error: str | None = None):
    tokens = await api_tokens.list_for(request.user.user_id)
    template = "accounts/tokens/_panel.html" if is_htmx(request) else "accounts/tokens/page.html"
    return page(request, template, status_code=status_code, tokens=tokens, new_token=new_token, error=error)


@get("/ui/tokens", opt=access(USER), include_in_schema=False)
async def tokens_page(request: Request) -> Template:
    return await _render(request)


@post("/ui/tokens", opt=access(USER), include_in_schema=False)
async def create_token(request: Request, data: Form[TokenForm]) -> Template:
    try:
        _, token = await api_tokens.create(request.user.user_id, data.name)
    except ServiceError as exc:
        return await _render(request, status_code=exc.status, error=str(exc))
    # Rendered directly, not redirected: the token is shown this once and never stored in the clear.
    return await _render(request, new_token=token)


@post("/ui/tokens/{token_id:int}/revoke", opt=access(USER), include_in_schema=False)
async def revoke_token(request: Request, token_id: FromPath[int]) -> Response:
    try:
        info = await api_tokens.revoke(request.user.user_id, token_id)
    except ServiceError as exc:
        return await _render(request, status_code=exc.status, error=str(exc))
    if is_htmx(request):
        return await _render(request)
    return redirect("/ui/tokens", f"Token “{info.name}” is revoked.")


ROUTES = [tokens_page, create_token, revoke_token]
