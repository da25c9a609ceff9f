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
        "jobs",
        "Jobs",
        COORDINATOR,
        "Map-reduce jobs written in JavaScript with the PeerMR SDK.",
        (
            "An editor with line numbers and JavaScript highlighting; syntax errors shown with their line on save.",
            "A Run button that opens the run dialog, prefilled from the script's metadata.",
            "The same jobs through the REST API (POST /api/v1/jobs) and `peermr job run`.",
        ),
    ),
    Section(
        "runs",
        "Runs",
        COORDINATOR,
        "Every run of your jobs, queued, running and finished.",
        (
            "Queue position, or the reason a run waits for workers.",
            "Per-stage progress, a task timeline per worker, logs, and the output to browse or download.",
        ),
    ),
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
