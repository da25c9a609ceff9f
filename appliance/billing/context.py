"""Billing's view of the settings: the appliance time zone (periods are its calendar months) and Stripe.

``configure(settings)`` is called once by the app and by ``peermr bill``; until then billing works in
UTC without Stripe, which is what the unit tests of the ledger use.
"""

from __future__ import annotations

from zoneinfo import ZoneInfo

from appliance.config import Settings

_settings: Settings | None = None


def configure(settings: Settings) -> None:
    global _settings
    _settings = settings


def settings() -> Settings:
    return _settings if _settings is not None else Settings()


def timezone() -> ZoneInfo:
    return ZoneInfo(settings().timezone)


def stripe_enabled() -> bool:
    return bool(settings().stripe_api_key)
