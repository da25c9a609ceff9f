"""A local Stripe test server for the billing tests: localstripe (PyPI) on 127.0.0.1, in memory.

Run as ``python tests/stripe_server.py --port N``. localstripe 1.15 implements customers, invoice
items and invoices, but only invoices made from a subscription: this launcher adds, on top of its
own models and nothing else,
- ``POST /v1/invoices`` without a subscription (a one-off draft invoice, as Stripe allows;
  ``currency``, ``collection_method``, ``days_until_due``, ``auto_advance`` and
  ``pending_invoice_items_behavior`` are accepted),
- ``POST /v1/invoiceitems`` with ``invoice`` puts the item on that draft invoice's lines,
- ``POST /v1/invoices/{id}/finalize`` (draft to open).
localstripe pickles its store to /tmp after every write; here the store stays in memory, so
parallel test runs do not share it. localstripe has no Connect endpoints (accounts, account links,
transfers): the payout tests use a recording server of their own (tests/integration/test_billing_stripe.py).
"""

from __future__ import annotations

import argparse

from aiohttp import web
from localstripe import resources, server
from localstripe.errors import UserError
from localstripe.resources import Event, Invoice, InvoiceItem, InvoiceLineItem
from localstripe.webhooks import schedule_webhook

resources.Store.dump_to_disk = lambda self: None

ONE_OFF_OPTIONS = {"currency", "collection_method", "days_until_due", "auto_advance", "pending_invoice_items_behavior"}
_create_invoice = Invoice._api_create.__func__
_create_item = InvoiceItem._api_create.__func__


def create_invoice(cls, customer=None, subscription=None, description=None, metadata=None, **options):
    if subscription is not None:
        return _create_invoice(cls, customer=customer, subscription=subscription, description=description, **options)
    unexpected = set(options) - ONE_OFF_OPTIONS
    if unexpected:
        raise UserError(400, "Unexpected " + ", ".join(sorted(unexpected)))
    invoice = Invoice(customer=customer, description=description, metadata=metadata)
    invoice.currency = options.get("currency") or invoice.currency
    invoice.collection_method = options.get("collection_method") or invoice.collection_method
    invoice.auto_advance = str(options.get("auto_advance", "true")).lower() == "true"
    return invoice


def create_item(cls, **data):
    if data.get("invoice") is not None:
        invoice = Invoice._api_retrieve(data["invoice"])
        if invoice.status != "draft":
            raise UserError(400, "Invoice is not a draft")
    item = _create_item(cls, **data)
    if item.invoice is not None:
        Invoice._api_retrieve(item.invoice).lines._list.append(InvoiceLineItem(item))
    return item


def finalize_invoice(id, auto_advance=None, **kwargs):
    invoice = Invoice._api_retrieve(id)
    if invoice.status != "draft":
        raise UserError(400, "This invoice is already finalized")
    invoice._finalize()
    schedule_webhook(Event("invoice.finalized", invoice))
    return invoice


Invoice._api_create = classmethod(create_invoice)
InvoiceItem._api_create = classmethod(create_item)
server.app.router.add_route(
    "POST", "/v1/invoices/{id}/finalize", server.api_extra(finalize_invoice, "/v1/invoices/{id}/finalize")
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    web.run_app(server.app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
