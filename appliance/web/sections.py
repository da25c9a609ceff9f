"""The dashboard sections that later parts of the appliance fill in, and what each will show."""

from __future__ import annotations

from typing import NamedTuple

from appliance.accounts.auth import COORDINATOR, USER


class Section(NamedTuple):
    slug: str
    title: str
    level: str
    summary: str
    coming: tuple[str, ...]


SECTIONS = (
    Section(
        "billing",
        "Billing",
        COORDINATOR,
        "What your runs use and what they cost.",
        (
            "This month's CPU, GPU, storage, peer-to-peer and relay usage, with a chart and an estimate.",
            "Past invoices and statements to download.",
        ),
    ),
    Section(
        "payments",
        "Payments",
        USER,
        "What your browsers contributed to other people's runs, and what they earned.",
        (
            "This month's contribution and earnings.",
            "Onboarding to get paid, and past payouts.",
        ),
    ),
)
