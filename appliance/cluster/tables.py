"""Cluster tables: who holds the scheduler's leadership (leadership.py writes and reads it in SQL on its
own connections), and the installation's identity (installation.py)."""

from piccolo.columns import UUID, BigInt, Boolean, Integer, Text, Timestamptz
from piccolo.table import Table


class Leader(Table, tablename="cluster_leader"):
    """The process that last took the leadership lock ``lock_key``: believed only while the session
    ``backend_pid`` still holds that lock (a dead leader's row names nobody)."""

    lock_key = BigInt(unique=True)
    url = Text()  # the leader's advertised URL
    backend_pid = Integer()  # the PostgreSQL backend of its lock connection
    since = Timestamptz()


class Installation(Table, tablename="cluster_installation"):
    """One row: the id every process on this database shares, which names its Redis channels, so two
    installations on one Redis (production and staging) never hear each other."""

    one = Boolean(default=True, unique=True)  # at most one row
    installation = UUID()
