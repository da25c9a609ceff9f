"""``peermr backup DIR`` and ``peermr restore DIR --data-dir NEW``."""

from __future__ import annotations

import argparse
from pathlib import Path

from appliance.commands import command_settings, existing_store_settings


def add_parser(sub) -> None:
    backup = sub.add_parser(
        "backup",
        help="copy the data directory (database, blobs, secrets) into DIR, while the appliance runs",
        description="A consistent copy, taken while the appliance runs: SQLite's online backup (PostgreSQL: "
        "pg_dump), the blobs pinned on the appliance, secrets.json and peermr.toml. DIR must be new or empty; "
        "keep it as private as the data directory.",
    )
    backup.add_argument("dir", metavar="DIR", help="where to write the backup (new or empty)")
    backup.add_argument("--data-dir", help="data directory (default ./peermr-data, env PEERMR_DATA_DIR)")
    backup.set_defaults(func=cmd_backup)

    restore = sub.add_parser(
        "restore",
        help="restore a backup into a new data directory (--data-dir, required)",
        description="Copy the backup in DIR into the data directory given by --data-dir, which must be new or "
        "empty (PostgreSQL: into the empty database of PEERMR_DATABASE_URL). Then start the appliance on it.",
    )
    restore.add_argument("dir", metavar="DIR", help="a directory `peermr backup` wrote")
    restore.add_argument(
        "--data-dir", required=True, help="the data directory to create (new or empty: nothing is overwritten)"
    )
    restore.set_defaults(func=cmd_restore)


def cmd_backup(args: argparse.Namespace) -> None:
    from appliance.backup import service

    settings = existing_store_settings(args)
    target = Path(args.dir).expanduser().resolve()
    summary = service.backup(settings, target)
    print(
        f"Backed up {settings.data_path} into {target}: the {summary.database} database, "
        f"{summary.blobs} blob(s) ({summary.blob_bytes:,} bytes), {', '.join(summary.files[1:])}."
    )
    if summary.missing_blobs:
        print(
            f"{len(summary.missing_blobs)} blob(s) the database lists were removed while the backup ran: "
            f"{', '.join(summary.missing_blobs[:5])}{' ...' if len(summary.missing_blobs) > 5 else ''}"
        )


def cmd_restore(args: argparse.Namespace) -> None:
    from appliance.backup import service

    settings = command_settings(args)
    source = Path(args.dir).expanduser().resolve()
    summary = service.restore(source, settings)
    print(f"Restored the backup of {summary.created} (peermr {summary.version}) into {settings.data_path}.")
    print(f"Start the appliance on it: peermr serve --data-dir {settings.data_path}")
