"""Billing tables: the usage ledger, prices, closed periods, statements, invoices, payouts, Stripe ids.

Accounts are referred to by user id without a foreign key: the ledger and the statements are
financial records and outlive an account that is deleted.
"""

from piccolo.columns import BigInt, Boolean, Date, ForeignKey, Integer, OnDelete, Text, Timestamptz, Varchar
from piccolo.table import Table


class UsageEntry(Table, tablename="billing_usage"):
    """One metered quantity: append-only (a correction is another row, never an edit)."""

    # What produced it ("run:12:consumer:cpu_ms", "p2p:<transfer>:egress", ...): a second row with the
    # same source is never inserted, so every meter may safely report the same event again.
    source = Varchar(length=200, unique=True)
    account = Integer(index=True)
    # cpu_ms | gpu_ms | storage_byte_hours | p2p_bytes | turn_bytes (see ledger.RESOURCES)
    resource = Varchar(length=24)
    # consumer (the account is charged) | provider (the account's browsers earn it)
    side = Varchar(length=8)
    quantity = BigInt()
    run = Integer(null=True, default=None)
    # When the usage happened, and the billing period it counts in: the period of ``at``, or the first
    # period still open after it when that one was already closed.
    at = Timestamptz(index=True)
    period = Varchar(length=7, index=True)
    recorded_at = Timestamptz()


class Price(Table, tablename="billing_price"):
    """A resource's coordinator price and worker payout rate from a date on (rows are never edited)."""

    resource = Varchar(length=24, index=True)
    currency = Varchar(length=3)
    # Decimal text: minor currency units per pricing unit of the resource (ledger.RESOURCES).
    consumer_rate = Varchar(length=40)
    provider_rate = Varchar(length=40)
    # First local day (appliance time zone) the price applies to.
    effective_from = Date()
    created_at = Timestamptz()
    created_by = Integer(null=True, default=None)


class ClosedPeriod(Table, tablename="billing_period"):
    period = Varchar(length=7, unique=True)
    closed_at = Timestamptz()


class Statement(Table, tablename="billing_statement"):
    """An account's usage of one closed period priced: what it owes (consumer) or earned (provider)."""

    # "<kind>:<account>:<period>": one statement of each kind per account and period.
    slot = Varchar(length=64, unique=True)
    account = Integer(index=True)
    period = Varchar(length=7, index=True)
    kind = Varchar(length=8)
    currency = Varchar(length=3)
    total = BigInt()
    created_at = Timestamptz()


class StatementLine(Table, tablename="billing_statement_line"):
    statement = ForeignKey(Statement, on_delete=OnDelete.cascade, null=False, index=True)
    position = Integer()
    resource = Varchar(length=24)
    quantity = BigInt()
    # The rate applied (Decimal text, minor units per pricing unit) and the price row it came from.
    rate = Varchar(length=40)
    price = Integer(null=True, default=None)
    amount = BigInt()


class Invoice(Table, tablename="billing_invoice"):
    """The consumer statement sent to Stripe; ``key`` is unique and is the Stripe idempotency key."""

    key = Varchar(length=80, unique=True)
    statement = ForeignKey(Statement, on_delete=OnDelete.restrict, null=False, index=True)
    account = Integer(index=True)
    period = Varchar(length=7, index=True)
    amount = BigInt()
    currency = Varchar(length=3)
    # pending | sent | failed | nothing-due | offline (see settlement.py)
    state = Varchar(length=16, index=True)
    stripe_customer = Varchar(length=64, default="")
    stripe_invoice = Varchar(length=64, default="")
    # Stripe's own status (draft, open, paid, void, uncollectible), kept up to date by the webhook.
    stripe_status = Varchar(length=24, default="")
    hosted_url = Text(default="")
    error = Text(default="")
    attempts = Integer(default=0)
    updated_at = Timestamptz()


class Payout(Table, tablename="billing_payout"):
    """The provider statement paid through Stripe Connect; ``key`` is unique and the idempotency key."""

    key = Varchar(length=80, unique=True)
    statement = ForeignKey(Statement, on_delete=OnDelete.restrict, null=False, index=True)
    account = Integer(index=True)
    period = Varchar(length=7, index=True)
    amount = BigInt()
    currency = Varchar(length=3)
    # pending | awaiting-onboarding | sent | failed | nothing-due | offline (see settlement.py)
    state = Varchar(length=20, index=True)
    stripe_account = Varchar(length=64, default="")
    stripe_transfer = Varchar(length=64, default="")
    # paid | reversed (from the webhook), empty until then
    stripe_status = Varchar(length=24, default="")
    error = Text(default="")
    attempts = Integer(default=0)
    updated_at = Timestamptz()


class StripeCustomer(Table, tablename="billing_customer"):
    account = Integer(unique=True)
    stripe_id = Varchar(length=64)
    created_at = Timestamptz()


class ConnectedAccount(Table, tablename="billing_connected_account"):
    """A worker account's Stripe Connect account (Express), for payouts."""

    account = Integer(unique=True)
    stripe_id = Varchar(length=64)
    details_submitted = Boolean(default=False)
    payouts_enabled = Boolean(default=False)
    updated_at = Timestamptz()


class TurnCursor(Table, tablename="billing_turn_cursor"):
    """Relayed bytes of a TURN allocation already in the ledger (its row in turn_relay_usage is cumulative)."""

    allocation_id = Varchar(length=32, unique=True)
    metered = BigInt(default=0)
