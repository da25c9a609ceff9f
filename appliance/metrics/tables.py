"""Metrics tables: the fleet, and each account's browsers, sampled at a fixed interval for the Overview's
plots (sampler.py), and who may scrape GET /metrics (one row, set in Admin → Settings; access.py)."""

from piccolo.columns import BigInt, Integer, Text, Timestamptz, Varchar
from piccolo.table import Table


class FleetSample(Table, tablename="metrics_fleet_sample"):
    """The fleet and the work at one moment, and what moved since the sample before it."""

    at = Timestamptz(index=True)
    workers = Integer(default=0)  # connected
    busy = Integer(default=0)  # holding a rank in a run
    runs_running = Integer(default=0)
    runs_queued = Integer(default=0)
    # Since the previous sample: tasks the workers reported done, and bytes moved browser to browser.
    tasks_done = BigInt(default=0)
    peer_bytes = BigInt(default=0)
    # Payload bytes TURN relayed so far (every allocation's rows together): the plot draws differences.
    relayed_total = BigInt(default=0)
    seconds = Integer(default=0)  # the span the counts above cover


class AccountSample(Table, tablename="metrics_account_sample"):
    """One account's browsers at the moment of a fleet sample, for a worker account's own plots: written
    only for accounts with a browser connected or a task done since the sample before."""

    at = Timestamptz(index=True)
    account = Integer(index=True)  # an account id, without a foreign key (like the ledger's rows)
    workers = Integer(default=0)  # connected
    busy = Integer(default=0)  # holding a rank in a run
    tasks_done = BigInt(default=0)  # since the previous sample
    seconds = Integer(default=0)  # the span tasks_done covers


class MetricsAccess(Table, tablename="metrics_access"):
    # CIDRs whose addresses may scrape without a token (comma-separated); null: loopback only.
    allowed_sources = Text(null=True, default=None)
    # SHA-256 of the scrape token (shown once when made); "" when there is none.
    token_hash = Varchar(length=64, default="")
    token_prefix = Varchar(length=16, default="")
    updated_at = Timestamptz()
