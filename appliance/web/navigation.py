"""The dashboard's navigation, by role."""

from __future__ import annotations

from typing import NamedTuple

from appliance.accounts.sessions import Principal


class NavItem(NamedTuple):
    label: str
    href: str
    roles: frozenset[str]


ALL = frozenset({"admin", "coordinator", "worker"})
COORDINATORS = frozenset({"admin", "coordinator"})

NAV = (
    NavItem("Overview", "/ui", ALL),
    NavItem("Jobs", "/ui/jobs", COORDINATORS),
    NavItem("Runs", "/ui/runs", COORDINATORS),
    NavItem("Workers", "/ui/workers", ALL),
    NavItem("Storage", "/ui/storage", COORDINATORS),
    NavItem("Cloud Data", "/ui/cloud", COORDINATORS),
    NavItem("Billing", "/ui/billing", COORDINATORS),
    # Worker accounts are paid; a coordinator whose browsers earned reaches it from Billing.
    NavItem("Payments", "/ui/payments", frozenset({"admin", "worker"})),
    NavItem("Admin", "/ui/admin", frozenset({"admin"})),
)


def nav_for(principal: Principal | None) -> list[NavItem]:
    if principal is None or principal.via != "dashboard":
        return []
    return [item for item in NAV if principal.role in item.roles]
