"""Who may scrape GET /metrics: a caller with the scrape token (Authorization: Bearer), or one whose
address is in the allow-list (loopback only until an admin sets it). An admin's API token is not
accepted: a Prometheus configuration should hold a credential that can read metrics and nothing else.
"""

from __future__ import annotations

import hmac
import ipaddress

import msgspec

from appliance.accounts import credentials
from appliance.audit import service as audit
from appliance.clock import now
from appliance.config import parse_cidrs
from appliance.db import save_only_row
from appliance.errors import InvalidRequest
from appliance.metrics.tables import MetricsAccess

DEFAULT_SOURCES = "127.0.0.0/8, ::1"
TOKEN_PREFIX = "pmm_"


class Policy(msgspec.Struct, frozen=True):
    sources: str  # as stored or the default
    is_default: bool
    token_prefix: str  # "" when no token was made
    token_hash: str


async def policy() -> Policy:
    row = await MetricsAccess.select().first()
    stored = row["allowed_sources"] if row else None
    return Policy(
        sources=DEFAULT_SOURCES if stored is None else stored,
        is_default=stored is None,
        token_prefix=row["token_prefix"] if row else "",
        token_hash=row["token_hash"] if row else "",
    )


class Refusal(msgspec.Struct, frozen=True):
    status: int
    message: str


async def check(authorization: str, address: str) -> Refusal | None:
    """None when the caller may scrape; else the status and a message saying what would let it."""
    rules = await policy()
    scheme, _, token = authorization.partition(" ")
    if scheme:
        offered = credentials.token_hash(token.strip())
        if scheme.lower() == "bearer" and rules.token_hash and hmac.compare_digest(offered, rules.token_hash):
            return None
        return Refusal(401, "This is not the appliance's metrics token (Admin → Settings → Metrics makes one).")
    try:
        source = ipaddress.ip_address(address)
    except ValueError:
        source = None
    if source is not None and any(source in net for net in parse_cidrs(rules.sources)):
        return None
    return Refusal(
        403,
        f"Metrics are served to the addresses an admin allows ({rules.sources or 'none'}), not to {address}, "
        "or with the metrics token as a bearer token (Admin → Settings → Metrics).",
    )


async def _save(values: dict) -> None:
    await save_only_row(MetricsAccess, {**values, MetricsAccess.updated_at: now()})


async def save_sources(text: str) -> str:
    """The allow-list as typed (CIDRs or addresses, commas or lines); empty allows no address."""
    try:
        networks = parse_cidrs(text)
    except ValueError as exc:
        raise InvalidRequest(f"Metrics allow-list: {exc}.") from None
    value = ", ".join(str(n) for n in networks)
    before = (await policy()).sources
    await _save({MetricsAccess.allowed_sources: value})
    await audit.note("settings.metrics_sources", "GET /metrics allow-list", {"sources": before}, {"sources": value})
    return value


async def new_token() -> str:
    """A new scrape token (the old one stops working); returned here and never again."""
    token = credentials.new_token(TOKEN_PREFIX)
    before = (await policy()).token_prefix
    await _save({MetricsAccess.token_hash: credentials.token_hash(token), MetricsAccess.token_prefix: token[:12]})
    await audit.note("settings.metrics_token", "GET /metrics token", {"prefix": before or None}, {"prefix": token[:12]})
    return token
