"""``peermr audit verify``: check the audit log's hash chain, in-process on the data dir."""

from __future__ import annotations

import argparse
import asyncio
import sys

from appliance.commands import existing_store_settings


def add_parser(sub) -> None:
    audit = sub.add_parser("audit", help="the audit log").add_subparsers(
        dest="audit_command", required=True, metavar="ACTION"
    )
    verify = audit.add_parser(
        "verify",
        help="check that no audit entry was changed, deleted or inserted",
        description="Walk the audit log's hash chain from its anchor (the last pruned entry) to its head. "
        "Exit status 0 when it is intact, 1 naming the first entry that is not.",
    )
    verify.add_argument("--data-dir", help="data directory (default ./peermr-data, env PEERMR_DATA_DIR)")
    verify.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> None:
    from appliance import db
    from appliance.audit import service

    settings = existing_store_settings(args)
    db.configure(settings)

    async def check():
        await db.migrate()
        return await service.verify(), await service.chain_state()

    verdict, ends = asyncio.run(check())
    if not verdict.ok:
        intact = f"{verdict.checked} entries before it are intact"
        print(f"peermr: the audit log was tampered with: {verdict.problem} ({intact})", file=sys.stderr)
        sys.exit(1)
    pruned = f", {ends['pruned']} older ones pruned" if ends["pruned"] else ""
    head = f"#{ends['head_id']} {ends['head_digest'] or '(empty)'}"
    print(f"The audit log is intact: {verdict.checked} entries{pruned}; head {head}.")
