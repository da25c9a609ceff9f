"""Billing's periodic jobs (APScheduler, in the appliance time zone) and the catch-up at start."""

from __future__ import annotations

import logging

from appliance.billing import meters, settlement
from appliance.billing.context import BillingContext
from appliance.fleet.registry import Fleet
from appliance.scheduler import PeriodicJob

log = logging.getLogger(__name__)


def jobs(fleet: Fleet, billing: BillingContext) -> list[PeriodicJob]:
    async def sample_storage() -> None:
        # Connected browsers, by worker id: only they earn for what they hold.
        live = {w.worker_id: w.account_id for w in fleet.workers.values()}
        await meters.sample_storage(live, billing.tz)

    async def sweep_turn() -> None:
        await meters.sweep_turn(billing.tz)

    async def close_due() -> None:
        await settlement.close_due(billing)

    async def settle() -> None:
        await settlement.settle(billing)

    return [
        # Each hour's storage sample, on the hour (its source names the hour: a second run adds nothing).
        PeriodicJob("billing.sample_storage", sample_storage, "cron", {"minute": 0}),
        PeriodicJob("billing.sweep_turn", sweep_turn, "interval", {"minutes": 5}),
        # The previous month closes on the 1st, shortly after midnight in the appliance time zone.
        PeriodicJob("billing.monthly_close", close_due, "cron", {"day": 1, "hour": 0, "minute": 15}),
        # Payouts waiting for a worker to finish onboarding, and anything a crash left pending.
        PeriodicJob("billing.settle", settle, "cron", {"hour": 6, "minute": 0}),
    ]


async def catch_up(billing: BillingContext) -> None:
    """At start: close the months missed while the appliance was down, and send what is pending."""
    try:
        closed = await settlement.close_due(billing)
        if closed:
            log.info("closed billing period(s) missed while the appliance was down: %s", ", ".join(closed))
    except Exception:
        log.exception("closing missed billing periods failed; the monthly job tries again")
