"""What every `peermr` sub-command shares, kept apart from appliance/cli.py so that the domains'
commands (jobs/cli.py, pmrfs/cli.py, billing/cli.py) and the API client can import it while
cli.py imports them."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from appliance.config import Settings, load_settings
from appliance.data_dir import keep_private
from appliance.errors import ServiceError

# The flags a command may take that override settings (see config.py for the precedence).
SETTINGS_FLAGS = ("data_dir", "host", "port", "turn_port", "public_url", "tls_cert", "tls_key")


class CommandError(ServiceError):
    """Reported as `peermr: <message>` with exit status 1, like any ServiceError a command raises."""


def command_settings(args: argparse.Namespace, **flags: object) -> Settings:
    """The appliance's settings with the command's flags (and ``flags``) on top. Whatever the command
    creates from here on (every command calling this works on the data dir) is its user's alone."""
    keep_private()
    return load_settings({**{name: getattr(args, name, None) for name in SETTINGS_FLAGS}, **flags})


def add_token_flags(parser: argparse.ArgumentParser, what: str = "an API token") -> None:
    """--token-file and --token; PEERMR_TOKEN is read when neither is given (``token_from``)."""
    parser.add_argument(
        "--token-file", metavar="FILE", help=f"read {what} from FILE ('-': standard input); or set PEERMR_TOKEN"
    )
    parser.add_argument("--token", help=f"{what} (shows in ps and shell history: prefer PEERMR_TOKEN or --token-file)")


def token_from(args: argparse.Namespace) -> str:
    """The token of --token-file, --token or PEERMR_TOKEN, in that order; empty when none is given."""
    path = getattr(args, "token_file", None)
    if path and args.token:
        raise CommandError("give --token-file or --token, not both")
    if not path:
        return args.token or os.environ.get("PEERMR_TOKEN", "")
    try:
        token = sys.stdin.readline() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise CommandError(f"cannot read the token file {path}: {exc.strerror}") from exc
    if not token.strip():
        raise CommandError(f"the token file {path} is empty")
    return token.strip()


def existing_store_settings(args: argparse.Namespace) -> Settings:
    """``command_settings`` for a command that works on an appliance's existing data (user add, token
    create, bill, audit verify): run from the wrong folder, it must say where it looked rather than
    create an empty data dir there and report that the account does not exist."""
    settings = command_settings(args)
    if not settings.uses_postgres and not settings.sqlite_path.is_file():
        raise CommandError(
            f"no appliance data in {settings.data_path} (no {settings.sqlite_path.name}): give the appliance's "
            "data directory with --data-dir or PEERMR_DATA_DIR, or create one with `peermr migrate`"
        )
    return settings
