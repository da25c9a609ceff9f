"""Account endpoints of the REST API."""

from __future__ import annotations

import msgspec
from litestar import Request, get

from appliance.accounts.auth import USER, access


class Me(msgspec.Struct):
    email: str
    role: str


@get("/api/v1/me", opt=access(USER), summary="The account this API token belongs to", tags=["accounts"])
async def me(request: Request) -> Me:
    return Me(email=request.user.email, role=request.user.role)


ROUTES = [me]
