"""TURN tables: relayed bytes per allocation (for billing), and the admin's peer rules."""

from piccolo.columns import BigInt, Text, Timestamptz, Varchar
from piccolo.table import Table


class RelayUsage(Table, tablename="turn_relay_usage"):
    """One allocation's relayed payload bytes, updated while it lives and closed when it ends."""

    allocation_id = Varchar(length=32, unique=True)
    # As named in the TURN username ("<expiry>:<account>.<run>"): account and run ids.
    account = Varchar(length=64, index=True)
    run = Varchar(length=64, null=True, default=None)
    client = Varchar(length=80)
    relay = Varchar(length=80)
    started_at = Timestamptz(index=True)
    updated_at = Timestamptz()
    ended_at = Timestamptz(null=True, default=None)
    bytes_to_peer = BigInt(default=0)
    bytes_from_peer = BigInt(default=0)


class PeerRules(Table, tablename="turn_peer_rules"):
    """The admin's allow and deny lists (one row), added to those of the environment."""

    allowed = Text(default="")
    denied = Text(default="")
    updated_at = Timestamptz()
