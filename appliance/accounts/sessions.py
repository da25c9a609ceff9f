"""Server-side sessions: the cookie holds a random key, the database its hash."""

from __future__ import annotations

import datetime as dt

import msgspec

from appliance.accounts import credentials
from appliance.accounts.tables import Session
from appliance.audit import service as audit
from appliance.clock import now

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


async def start(user_id: int, kind: str, idle: dt.timedelta, user_agent: str = "", client: str = "") -> str:
    key = credentials.new_token()
    t = now()
    await Session.insert(
        Session(
            key_hash=credentials.token_hash(key),
            user=user_id,
            kind=kind,
            created_at=t,
            last_seen_at=t,
            expires_at=min(t + idle, t + MAX_AGE),
            user_agent=user_agent[:255],
            client=client[:64],
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
        )
        .where((Session.key_hash == key_hash) & (Session.kind == kind))
        .first()
    )
    t = now()
    if row is None or not row["active"]:
        return None
    if row["expires_at"] <= t:
        await Session.delete().where(Session.id == row["id"])
        return None
    if t - row["last_seen_at"] >= TOUCH_INTERVAL:
        await Session.update(
            {Session.last_seen_at: t, Session.expires_at: min(t + idle, row["created_at"] + MAX_AGE)}
        ).where(Session.id == row["id"])
    return Principal(
        user_id=row["user_id"],
        email=row["email"],
        role=row["role"],
        must_change_password=bool(row["must_change_password"]),
        via=kind,
        credential_hash=key_hash,
    )


async def end(key: str) -> None:
    """Sign out: the session is gone."""
    ended = await Session.delete().where(Session.key_hash == credentials.token_hash(key)).returning(Session.kind)
    if ended:
        await audit.note("sign-out", ended[0]["kind"] + " session")
