"""Refused relay permissions (403): counted on /metrics by rule, and logged.

Only the first few of each allocation are logged: a client that tries a whole network would
otherwise fill the log, and the counter already shows how many there were.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter

from appliance.turn.allocation import Allocation
from appliance.turn.policy import DENIED, RESERVED, UNANNOUNCED

log = logging.getLogger(__name__)

LOGGED_PER_ALLOCATION = 5
WHY = {
    DENIED: "in a denied network",
    RESERVED: "a loopback, link-local, multicast, reserved or appliance address",
    UNANNOUNCED: "not a candidate of any connected worker",
}
REFUSED = Counter(
    "peermr_turn_permissions_refused_total", "TURN permissions refused (403), by the rule that refused them", ["reason"]
)
for _reason in WHY:
    REFUSED.labels(_reason)  # shown as 0 before the first refusal


def refused(allocation: Allocation, peer: tuple[str, int], reason: str) -> None:
    REFUSED.labels(reason).inc()
    allocation.refusals += 1
    if allocation.refusals <= LOGGED_PER_ALLOCATION:
        log.info(
            "TURN refused account %s a permission to %s: %s%s",
            allocation.identity.account,
            peer[0],
            WHY[reason],
            " (further refusals of this allocation are only counted)"
            if allocation.refusals == LOGGED_PER_ALLOCATION
            else "",
        )
