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
