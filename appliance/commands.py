"""What every `peermr` sub-command shares, kept apart from appliance/cli.py so that the domains'
commands (jobs/cli.py, pmrfs/cli.py, billing/cli.py) and the API client can import it while
cli.py imports them."""

from __future__ import annotations

import argparse

from appliance.config import Settings, load_settings
from appliance.data_dir import keep_private
from appliance.errors import ServiceError

# The flags a command may take that override settings (see config.py for the precedence).
SETTINGS_FLAGS = ("data_dir", "host", "port", "turn_port", "public_url")


class CommandError(ServiceError):
    """Reported as `peermr: <message>` with exit status 1, like any ServiceError a command raises."""


def command_settings(args: argparse.Namespace) -> Settings:
    """The appliance's settings with the command's flags on top. Whatever the command creates from
    here on (every command calling this works on the data dir) is its user's alone."""
    keep_private()
    return load_settings({name: getattr(args, name, None) for name in SETTINGS_FLAGS})


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
