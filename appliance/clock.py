"""The appliance's notion of now: timezone-aware UTC, as every table stores it."""

import datetime as dt


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
