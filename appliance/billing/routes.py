"""``POST /billing/stripe/webhook``: Stripe's events about invoices, transfers and connected accounts.

Public (Stripe calls it), exempt from CSRF, and trusted only when the ``Stripe-Signature`` header
is valid for ``PEERMR_STRIPE_WEBHOOK_SECRET`` and at most five minutes old. Without that setting the
endpoint answers 503 and reads nothing.
"""

from __future__ import annotations

import logging

from litestar import Request, Response, post

from appliance.accounts.auth import PUBLIC, access
from appliance.billing import settlement
from appliance.billing.stripe_gateway import verify_event

log = logging.getLogger(__name__)

# Stripe's events are small; anything larger is not one of them.
MAX_EVENT_BYTES = 1024 * 1024


@post(
    "/billing/stripe/webhook",
    opt={**access(PUBLIC), "exclude_from_csrf": True},
    include_in_schema=False,
    status_code=200,
    request_max_body_size=MAX_EVENT_BYTES,
)
async def stripe_webhook(request: Request) -> Response:
    secret = request.app.state.settings.stripe_webhook_secret
    if not secret:
        return Response({"error": "Stripe webhooks are not configured on this appliance"}, status_code=503)
    payload = await request.body()
    try:
        event = verify_event(payload, request.headers.get("stripe-signature"), secret)
    except ValueError as exc:
        log.warning("refused a Stripe webhook: %s", exc)
        return Response({"error": "invalid signature"}, status_code=400)
    outcome = await settlement.apply_event(request.app.state.billing, event)
    log.info("Stripe event %s (%s): %s", event.get("id", ""), event["type"], outcome)
    return Response({"received": True, "outcome": outcome}, status_code=200)


ROUTES = [stripe_webhook]
