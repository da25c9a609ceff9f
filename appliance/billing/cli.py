"""``peermr bill --period YYYY-MM [--dry-run]``: the monthly close by hand, in-process on the data dir."""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING

from appliance.billing import periods
from appliance.commands import existing_store_settings

if TYPE_CHECKING:
    from appliance.billing.context import BillingContext


def add_parser(sub) -> None:
    bill = sub.add_parser(
        "bill",
        help="close a billing period: statements, invoices and payouts (as the monthly job does)",
        description="Close a month: price its usage into statements, one invoice per coordinator and one "
        "payout per worker account, and send them to Stripe when it is configured. Closing a month twice "
        "changes nothing.",
    )
    bill.add_argument("--period", required=True, help="the month to close, YYYY-MM (appliance time zone)")
    bill.add_argument(
        "--dry-run",
        action="store_true",
        help="print the statements without writing anything (the month under way: a preview so far)",
    )
    bill.add_argument("--data-dir", help="data directory (default ./peermr-data, env PEERMR_DATA_DIR)")
    bill.add_argument("--csv", action="store_true", help="print the statements as CSV")
    bill.set_defaults(func=cmd_bill)


async def _bill(args: argparse.Namespace, billing: BillingContext) -> str:
    from appliance.accounts import users
    from appliance.billing import service, settlement
    from appliance.billing.ledger import CONSUMER, RESOURCES
    from appliance.clock import now

    result = await settlement.close_period(billing, args.period, dry_run=args.dry_run)
    report = None
    if not args.dry_run:
        report = await settlement.settle(billing, args.period)
    if args.csv:
        return await service.statements_csv(args.period, found=result.statements)
    lines = []
    end = periods.bounds(args.period, billing.tz)[1]
    if args.dry_run and end > now():
        lines.append(f"Preview: {args.period} so far, as it would close now (nothing was written).")
    elif args.dry_run and result.dry_run and not await settlement.is_closed(args.period):
        lines.append(f"Dry run: {args.period} would close with these statements (nothing was written).")
    elif args.dry_run:
        lines.append(f"Dry run: {args.period} is already closed; its statements (nothing was written).")
    else:
        lines.append(f"{args.period} {'closed now' if result.closed_now else 'was already closed'}.")
    emails = await users.emails(s.account for s in result.statements)
    for s in result.statements:
        who = emails.get(s.account, f"account {s.account}")
        kind = "invoice" if s.kind == CONSUMER else "payout"
        lines.append(f"\n{who}: {kind} {service.format_money(s.total, s.currency)}")
        for line in s.lines:
            resource = RESOURCES[line.resource]
            lines.append(
                f"  {resource.label:<22} {line.quantity:>20} {resource.unit}(s)"
                f" at {line.rate} per {resource.price_unit}: {service.format_money(line.amount, s.currency)}"
            )
    if not result.statements:
        lines.append("No usage in this period.")
    if report is not None and (
        report.invoices_sent or report.payouts_sent or report.failed or report.awaiting_onboarding
    ):
        lines.append(
            f"\nStripe: {report.invoices_sent} invoice(s) and {report.payouts_sent} payout(s) sent, "
            f"{report.failed} failed, {report.awaiting_onboarding} payout(s) waiting for onboarding."
        )
    return "\n".join(lines)


def cmd_bill(args: argparse.Namespace) -> None:
    from appliance import db
    from appliance.billing.context import BillingContext

    periods.check(args.period)
    settings = existing_store_settings(args)
    db.configure(settings)
    billing = BillingContext.from_settings(settings)

    async def run() -> str:
        await db.migrate()
        return await _bill(args, billing)

    print(asyncio.run(run()))
