"""Stripe, through the official SDK (PyPI ``stripe``) on its async httpx transport.

Only used when ``PEERMR_STRIPE_API_KEY`` is set; ``PEERMR_STRIPE_API_BASE`` points the SDK at
another server (a local test server). Every call that creates something carries an idempotency key
derived from the invoice's or payout's unique key, and before creating anything the gateway looks
for what an earlier, interrupted attempt may already have created (by metadata, or by transfer
group): Stripe keeps idempotency keys for 24 hours only, and a rerun after a crash may come later.
"""

from __future__ import annotations

import json

import stripe

from appliance.errors import Unavailable

# Stripe's list pages hold at most 100 objects.
PAGE = 100


class StripeUnavailable(Unavailable):
    """Stripe is not configured (no API key), or the call failed (503); the message says which."""


def _meta(obj, name: str) -> str:
    metadata = getattr(obj, "metadata", None)
    if metadata is None:
        return ""
    values = metadata.to_dict() if hasattr(metadata, "to_dict") else dict(metadata)
    return str(values.get(name, ""))


class StripeGateway:
    def __init__(self, api_key: str, api_base: str = ""):
        base = api_base.rstrip("/")
        self.client = stripe.StripeClient(
            api_key,
            base_addresses={"api": base, "connect": base} if base else None,
            http_client=stripe.HTTPXClient(),
            max_network_retries=2,
        )
        self.v1 = self.client.v1

    # ------------------------------------------------------------------ customers and invoices

    async def customer(self, account: int, email: str) -> str:
        """The Stripe customer of an account: found by its metadata, or created."""
        page = await self.v1.customers.list_async(params={"email": email, "limit": PAGE})
        for customer in page.data:
            if _meta(customer, "peermr_account") == str(account):
                return customer.id
        created = await self.v1.customers.create_async(
            params={
                "email": email,
                "description": f"PeerMR account {account}",
                "metadata": {"peermr_account": str(account)},
            },
            options={"idempotency_key": f"peermr-customer-{account}"},
        )
        return created.id

    async def find_invoice(self, customer: str, key: str):
        page = await self.v1.invoices.list_async(params={"customer": customer, "limit": PAGE})
        return next((i for i in page.data if _meta(i, "peermr_key") == key), None)

    async def create_invoice(self, customer: str, key: str, period: str, currency: str):
        return await self.v1.invoices.create_async(
            params={
                "customer": customer,
                "currency": currency,
                "collection_method": "send_invoice",
                "days_until_due": 30,
                "auto_advance": True,
                "pending_invoice_items_behavior": "exclude",
                "description": f"PeerMR usage {period}",
                "metadata": {"peermr_key": key, "peermr_period": period},
            },
            options={"idempotency_key": key},
        )

    async def invoice_line_keys(self, invoice_id: str) -> set[str]:
        page = await self.v1.invoices.line_items.list_async(invoice_id, params={"limit": PAGE})
        return {_meta(line, "peermr_line") for line in page.data} - {""}

    async def add_item(
        self, customer: str, invoice_id: str, line_key: str, amount: int, currency: str, description: str
    ) -> None:
        await self.v1.invoice_items.create_async(
            params={
                "customer": customer,
                "invoice": invoice_id,
                "amount": amount,
                "currency": currency,
                "description": description,
                "metadata": {"peermr_line": line_key},
            },
            options={"idempotency_key": line_key},
        )

    async def finalize(self, invoice_id: str, key: str):
        return await self.v1.invoices.finalize_invoice_async(
            invoice_id, params={"auto_advance": True}, options={"idempotency_key": f"{key}:finalize"}
        )

    async def retrieve_invoice(self, invoice_id: str):
        return await self.v1.invoices.retrieve_async(invoice_id)

    # ------------------------------------------------------------------ Connect

    async def create_connected_account(self, account: int, email: str) -> str:
        created = await self.v1.accounts.create_async(
            params={
                "type": "express",
                "email": email,
                "capabilities": {"transfers": {"requested": True}},
                "metadata": {"peermr_account": str(account)},
            },
            options={"idempotency_key": f"peermr-connect-{account}"},
        )
        return created.id

    async def account_link(self, stripe_account: str, return_url: str, refresh_url: str) -> str:
        link = await self.v1.account_links.create_async(
            params={
                "account": stripe_account,
                "return_url": return_url,
                "refresh_url": refresh_url,
                "type": "account_onboarding",
            }
        )
        return link.url

    async def retrieve_account(self, stripe_account: str):
        return await self.v1.accounts.retrieve_async(stripe_account)

    async def find_transfer(self, destination: str, key: str):
        page = await self.v1.transfers.list_async(params={"destination": destination, "transfer_group": key})
        return next((t for t in page.data if getattr(t, "transfer_group", None) == key), None)

    async def transfer(self, destination: str, key: str, amount: int, currency: str, period: str):
        return await self.v1.transfers.create_async(
            params={
                "amount": amount,
                "currency": currency,
                "destination": destination,
                "transfer_group": key,
                "description": f"PeerMR payout {period}",
                "metadata": {"peermr_key": key, "peermr_period": period},
            },
            options={"idempotency_key": key},
        )


def verify_event(payload: bytes, signature: str | None, secret: str, tolerance: int = 300) -> dict:
    """The webhook's event (plain JSON) when its Stripe-Signature is valid for ``secret`` and at most
    ``tolerance`` seconds old; raises ValueError otherwise."""
    try:
        stripe.WebhookSignature.verify_header(payload, signature, secret, tolerance)
    except stripe.SignatureVerificationError as exc:
        raise ValueError(f"bad signature: {exc}") from None
    try:
        event = json.loads(payload)
    except ValueError:
        raise ValueError("the body is not JSON") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise ValueError("not a Stripe event")
    return event
