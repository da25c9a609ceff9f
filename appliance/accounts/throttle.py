"""Sign-in throttling.

Failures are counted per email *string* (whether or not such an account
exists, so the refusal reveals nothing) and per client address, over a sliding
window. Rows live in the database so the count survives a restart.
"""

from __future__ import annotations

import datetime as dt
import math

from appliance.accounts.tables import LoginFailure
from appliance.clock import now
from appliance.errors import TooManyRequests

# A client address may fail this many times more than one email before it is refused.
CLIENT_FACTOR = 4


class Throttled(TooManyRequests):
    """``by``: the count that was over its limit ("email" or "client")."""

    def __init__(self, retry_after: dt.timedelta, by: str):
        minutes = max(1, math.ceil(retry_after.total_seconds() / 60))
        self.retry_after = retry_after
        self.by = by
        super().__init__(
            f"Too many failed sign-in attempts. Wait {minutes} minute{'s' if minutes != 1 else ''} and try again."
        )


async def check(email: str, client: str, max_failures: int, window: dt.timedelta) -> None:
    """Raise Throttled if this email or client has failed too often in the window."""
    since = now() - window
    for column, value, limit in (
        (LoginFailure.email, email, max_failures),
        (LoginFailure.client, client, max_failures * CLIENT_FACTOR),
    ):
        rows = (
            await LoginFailure.select(LoginFailure.at)
            .where((column == value) & (LoginFailure.at >= since))
            .order_by(LoginFailure.at, ascending=False)
            .limit(limit)
        )
        if len(rows) >= limit:
            # Free again when the oldest of the last `limit` failures leaves the window.
            raise Throttled(rows[-1]["at"] + window - now(), column._meta.name)


async def record_failure(email: str, client: str) -> None:
    await LoginFailure.insert(LoginFailure(email=email, client=client, at=now()))


async def clear(email: str) -> None:
    await LoginFailure.delete().where(LoginFailure.email == email)
