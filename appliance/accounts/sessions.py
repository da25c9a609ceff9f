"""Server-side sessions: the cookie holds a random key, the database its hash.

A session ends with what it was made from: a dashboard session with a sign-out, a password change
or reset, a role change or the account disabled; a worker session with its token or enrolment link
revoked, or the account disabled. Ending one publishes ``SessionsEnded``, so the worker connections
opened with it close at once (fleet/connection.py).
"""

from __future__ import annotations

import datetime as dt

import msgspec
from piccolo.columns.combination import Combinable

from appliance.accounts import credentials
from appliance.accounts.tables import Session
from appliance.audit import service as audit
from appliance.clock import now
from appliance.events import EventHub, SessionsEnded

# Sessions are slid forward at most this often, to spare a write per request.
TOUCH_INTERVAL = dt.timedelta(minutes=1)
MAX_AGE = dt.timedelta(days=30)

DASHBOARD = "dashboard"
WORKER = "worker"


class Principal(msgspec.Struct, frozen=True):
    """Who is making a request: a user, through a session or an API token."""

    user_id: int
    email: str
    role: str
    must_change_password: bool
    # "dashboard" or "worker" for sessions, "token" for API tokens.
    via: str
    credential_hash: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def lifetime(until: dt.datetime | None = None) -> dt.timedelta:
    """How long a session started now may last at most: MAX_AGE, or less when what it is made from
    ends sooner (``until``, an enrolment link's expiry)."""
    return MAX_AGE if until is None else max(dt.timedelta(0), min(MAX_AGE, until - now()))


async def start(
    user_id: int,
    kind: str,
    idle: dt.timedelta,
    user_agent: str = "",
    client: str = "",
    *,
    api_token: int | None = None,
    enrolment_link: int | None = None,
    until: dt.datetime | None = None,
) -> str:
    """A new session; a worker session names the token (``api_token``) or link it was made from."""
    key = credentials.new_token()
    t = now()
    await Session.insert(
        Session(
            key_hash=credentials.token_hash(key),
            user=user_id,
            kind=kind,
            created_at=t,
            last_seen_at=t,
            expires_at=t + min(idle, lifetime(until)),
            user_agent=user_agent[:255],
            client=client[:64],
            api_token=api_token,
            enrolment_link=enrolment_link,
        )
    )
    return key


async def resolve(key: str, kind: str, idle: dt.timedelta) -> Principal | None:
    """The principal for a session cookie, sliding its expiry; None if unknown, expired or disabled."""
    key_hash = credentials.token_hash(key)
    row = (
        await Session.select(
            Session.id,
            Session.created_at,
            Session.last_seen_at,
            Session.expires_at,
            Session.user.id.as_alias("user_id"),
            Session.user.email.as_alias("email"),
            Session.user.role.as_alias("role"),
            Session.user.active.as_alias("active"),
            Session.user.must_change_password.as_alias("must_change_password"),
            Session.api_token.revoked_at.as_alias("token_revoked_at"),
            Session.enrolment_link.revoked_at.as_alias("link_revoked_at"),
            Session.enrolment_link.expires_at.as_alias("link_expires_at"),
        )
        .where((Session.key_hash == key_hash) & (Session.kind == kind))
        .first()
    )
    t = now()
    # Its token or link is revoked at once: a session made from one while it was being revoked ends here.
    if row is None or not row["active"] or row["token_revoked_at"] or row["link_revoked_at"]:
        return None
    if row["expires_at"] <= t:
        await Session.delete().where(Session.id == row["id"])
        return None
    if t - row["last_seen_at"] >= TOUCH_INTERVAL:
        limit = row["created_at"] + MAX_AGE
        if row["link_expires_at"] is not None:
            limit = min(limit, row["link_expires_at"])
        await Session.update({Session.last_seen_at: t, Session.expires_at: min(t + idle, limit)}).where(
            Session.id == row["id"]
        )
    return Principal(
        user_id=row["user_id"],
        email=row["email"],
        role=row["role"],
        must_change_password=bool(row["must_change_password"]),
        via=kind,
        credential_hash=key_hash,
    )


# The hubs that hear of sessions ending (app.create_app connects its own).
_hubs: list[EventHub] = []


def announce_to(hub: EventHub) -> None:
    """Publish ``SessionsEnded`` on ``hub`` from now on."""
    _hubs.append(hub)


def stop_announcing_to(hub: EventHub) -> None:
    if hub in _hubs:
        _hubs.remove(hub)


async def end_where(condition: Combinable, reason: str) -> int:
    """End the sessions matching ``condition`` and close what was opened with them, telling the person
    ``reason``. The number of sessions ended."""
    ended = await Session.delete().where(condition).returning(Session.key_hash)
    if ended:
        event = SessionsEnded(frozenset(row["key_hash"] for row in ended), reason)
        for hub in list(_hubs):
            await hub.publish(event)
    return len(ended)


async def end(key: str) -> None:
    """Sign out: the session is gone."""
    if await end_where((Session.key_hash == credentials.token_hash(key)) & (Session.kind == DASHBOARD), "signed out"):
        await audit.note("sign-out", "dashboard session")
