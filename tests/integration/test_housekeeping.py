"""Expired sessions and old sign-in failures are purged by the periodic job."""

from __future__ import annotations

import datetime as dt

from appliance import db
from appliance.accounts import housekeeping, sessions, users
from appliance.accounts.tables import LoginFailure, Session
from appliance.clock import now
from appliance.config import load_settings


async def test_purge_removes_only_what_expired(tmp_path):
    db.configure(load_settings({"data_dir": str(tmp_path / "data")}))
    await db.migrate()
    account, _ = await users.create_user("old@example.com", "worker", "old-password-1")
    live = await sessions.start(account.id, sessions.DASHBOARD, dt.timedelta(hours=1))
    stale = await sessions.start(account.id, sessions.DASHBOARD, dt.timedelta(hours=1))
    past = now() - dt.timedelta(minutes=1)
    await Session.update({Session.expires_at: past}).where(Session.key_hash == sessions.credentials.token_hash(stale))
    await LoginFailure.insert(
        LoginFailure(email="x@example.com", client="1.2.3.4", at=now() - dt.timedelta(days=2)),
        LoginFailure(email="y@example.com", client="1.2.3.4", at=now()),
    )

    await housekeeping.purge_expired()

    assert await sessions.resolve(live, sessions.DASHBOARD, dt.timedelta(hours=1)) is not None
    assert await Session.count() == 1
    assert [r["email"] for r in await LoginFailure.select(LoginFailure.email)] == ["y@example.com"]
