"""Periodic clean-up of expired account state."""

from __future__ import annotations

import logging

from appliance.accounts import throttle
from appliance.accounts.tables import LoginFailure, Session
from appliance.clock import now
from appliance.scheduler import PeriodicJob

log = logging.getLogger(__name__)


async def purge_expired() -> None:
    sessions = await Session.delete().where(Session.expires_at <= now()).returning(Session.id)
    failures = await LoginFailure.delete().where(LoginFailure.at < now() - throttle.MEMORY).returning(LoginFailure.id)
    if sessions or failures:
        log.info("purged %d expired sessions and %d old sign-in failures", len(sessions), len(failures))


JOBS = [PeriodicJob("accounts.purge_expired", purge_expired, "interval", {"minutes": 15})]
