"""An edge passes dashboard, API and blob requests to the active scheduler, streaming both ways.

The scheduler holds the state those pages show (the fleet, the runs), so an edge answers them by
asking it; the browser keeps talking to the edge it knows (or the load balancer in front of the
edges) whichever scheduler leads. The original Host is kept, so the scheduler's same-origin and
cookie rules see the address the browser used, and X-Forwarded-For carries the browser's address.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpx
from litestar.types import Receive, Scope, Send

# Headers about one hop of the connection, not the request (RFC 9110, section 7.6.1).
HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
}
RETRY_SECONDS = "2"


class LeaderProxy:
    def __init__(self, leader_url: Callable[[], str | None]):
        self.leader_url = leader_url
        # No read timeout: downloads and long polls last as long as the scheduler takes. A jar that
        # keeps nothing: the cookies are each browser's own, never one client's for all of them.
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=5.0),
            follow_redirects=False,
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        base = self.leader_url()
        if base is None:
            await unavailable(send, "no scheduler leads yet; try again in a few seconds")
            return
        path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string", b"")
        url = base.rstrip("/") + (path + (b"?" + query if query else b"")).decode("latin-1")
        request = self.client.build_request(
            scope["method"], url, headers=_forwarded(scope), content=_body(receive) if _has_body(scope) else None
        )
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            await unavailable(send, f"the active scheduler did not answer ({type(exc).__name__})")
            return
        try:
            headers = [(k, v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()


def _forwarded(scope: Scope) -> list[tuple[bytes, bytes]]:
    """The request's headers for the scheduler, with X-Forwarded-For the one address this edge found:
    a header the browser sent is not passed on, since the scheduler believes the first address in it
    (a load balancer in front of the edges is believed through uvicorn's FORWARDED_ALLOW_IPS)."""
    headers = [(k, v) for k, v in scope["headers"] if k.lower() not in HOP_BY_HOP and k.lower() != b"x-forwarded-for"]
    if client := scope.get("client"):
        headers.append((b"x-forwarded-for", client[0].encode()))
    headers.append((b"x-forwarded-proto", scope.get("scheme", "http").encode()))
    return headers


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name.lower() == b"transfer-encoding" or (name.lower() == b"content-length" and value.strip() != b"0"):
            return True
    return False


async def _body(receive: Receive):
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        if body := message.get("body", b""):
            yield body
        if not message.get("more_body"):
            return


async def unavailable(send: Send, why: str) -> None:
    """503, saying why, with Retry-After (no scheduler leads here yet)."""
    body = json.dumps({"status_code": 503, "detail": why}).encode()
    headers = [(b"content-type", b"application/json"), (b"retry-after", RETRY_SECONDS.encode())]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})
