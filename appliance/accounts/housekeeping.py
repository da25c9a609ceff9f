"""Periodic clean-up of expired account state."""

from __future__ import annotations

import datetime as dt
import logging

from appliance.accounts.tables import LoginFailure, Session
from appliance.clock import now
from appliance.scheduler import PeriodicJob

log = logging.getLogger(__name__)

# Longer than any sign-in throttling window is likely to be configured.
LOGIN_FAILURE_RETENTION = dt.timedelta(days=1)


async def purge_expired() -> None:
    sessions = await Session.delete().where(Session.expires_at <= now()).returning(Session.id)
    failures = (
        await LoginFailure.delete().where(LoginFailure.at < now() - LOGIN_FAILURE_RETENTION).returning(LoginFailure.id)
    )
    if sessions or failures:
        log.info("purged %d expired sessions and %d old sign-in failures", len(sessions), len(failures))


JOBS = [PeriodicJob("accounts.purge_expired", purge_expired, "interval", {"minutes": 15})]
