"""Billing's view of the settings: the appliance time zone (periods are its calendar months) and Stripe.

One ``BillingContext`` per process, built from the settings by ``create_app`` (the routes read
``app.state.billing``; the jobs get it at construction) and by ``peermr bill``; billing functions take
it, or just its ``tz``, from their caller.
"""

from __future__ import annotations

import asyncio
from zoneinfo import ZoneInfo

from appliance.background import BackgroundTasks
from appliance.billing.stripe_gateway import StripeGateway, StripeUnavailable
from appliance.config import Settings


class BillingContext:
    def __init__(self, tz: ZoneInfo, gateway: StripeGateway | None = None):
        self.tz = tz
        # None when Stripe is not configured (no PEERMR_STRIPE_API_KEY).
        self.gateway = gateway
        # One settlement at a time: sending invoices and payouts, retrying one.
        self.settling = asyncio.Lock()
        # Settlements a webhook starts after answering Stripe (cancelled when the appliance stops).
        self.background = BackgroundTasks("billing")

    @classmethod
    def from_settings(cls, settings: Settings) -> BillingContext:
        gateway = None
        if settings.stripe_api_key:
            gateway = StripeGateway(settings.stripe_api_key, settings.stripe_api_base)
        return cls(ZoneInfo(settings.timezone), gateway)

    @property
    def stripe_enabled(self) -> bool:
        return self.gateway is not None

    def require_gateway(self) -> StripeGateway:
        if self.gateway is None:
            raise StripeUnavailable("Stripe is not configured: set PEERMR_STRIPE_API_KEY")
        return self.gateway
