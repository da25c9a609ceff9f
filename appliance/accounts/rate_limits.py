"""Per-account rate limits: API requests, and run submissions from the API and the dashboard.

A generic cell rate algorithm per key (the account, or the client address of a caller without one):
up to ``per_minute`` requests at once, then one every ``60 / per_minute`` seconds. Over the limit
the answer is 429 with Retry-After, the exact wait before the next request is allowed. The counts
live in this process's memory: a restart forgets them, which only ever lets someone in sooner.
Litestar's own RateLimitMiddleware keys by client address and answers without Retry-After, hence this.
"""

from __future__ import annotations

import math
import time

from litestar.connection import ASGIConnection
from litestar.enums import ScopeType
from litestar.exceptions import TooManyRequestsException
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from appliance.accounts.auth import API_PREFIX, client_address

WINDOW_SECONDS = 60.0
# Keys whose allowance is full again are forgotten when the table grows past this.
PRUNE_AT = 10_000
# The ``opt`` a route that submits runs adds to its access level.
RUN_SUBMISSION = {"rate_limit": "runs"}


class Limiter:
    def __init__(self, per_minute: int, clock=time.monotonic):
        self.per_minute = per_minute
        self.interval = WINDOW_SECONDS / per_minute
        self.clock = clock
        # Key -> the theoretical arrival time of its next request (GCRA).
        self.next_at: dict[str, float] = {}

    def take(self, key: str) -> float:
        """0 if the request is allowed (and counted), else the seconds to wait before the next one is."""
        t = self.clock()
        after = max(self.next_at.get(key, t), t) + self.interval
        if after - t > WINDOW_SECONDS:
            return after - t - WINDOW_SECONDS
        if len(self.next_at) >= PRUNE_AT:
            self.next_at = {k: v for k, v in self.next_at.items() if v > t}
        self.next_at[key] = after
        return 0.0


class RateLimitMiddleware(ASGIMiddleware):
    """Runs after authentication (it keys by the signed-in account)."""

    scopes = (ScopeType.HTTP,)

    def __init__(self, api_per_minute: int, runs_per_minute: int) -> None:
        self.api = Limiter(api_per_minute) if api_per_minute else None
        self.runs = Limiter(runs_per_minute) if runs_per_minute else None

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        principal = scope.get("user")
        key = f"account:{principal.user_id}" if principal else f"address:{client_address(ASGIConnection(scope))}"
        if self.api and scope["path"].startswith(API_PREFIX):
            self._take(self.api, key, "API requests")
        handler = scope.get("route_handler")
        if self.runs and handler is not None and handler.opt.get("rate_limit") == RUN_SUBMISSION["rate_limit"]:
            self._take(self.runs, key, "run submissions")
        await next_app(scope, receive, send)

    @staticmethod
    def _take(limiter: Limiter, key: str, what: str) -> None:
        wait = limiter.take(key)
        if wait:
            seconds = max(1, math.ceil(wait))
            raise TooManyRequestsException(
                detail=f"Too many {what}: at most {limiter.per_minute} a minute per account. Try again in {seconds} s.",
                headers={"Retry-After": str(seconds)},
            )
