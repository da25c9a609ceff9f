"""Audit tables: the entries, append-only and chained by hash, and the chain's ends."""

from piccolo.columns import Integer, Text, Timestamptz, Varchar
from piccolo.table import Table


class AuditEntry(Table, tablename="audit_entry"):
    """One action. ``digest`` is SHA-256 over ``prev_digest`` and the other fields (chain.py)."""

    at = Timestamptz(index=True)
    actor = Varchar(length=320, index=True)
    action = Varchar(length=64, index=True)
    target = Varchar(length=400)
    address = Varchar(length=64)
    # Canonical JSON (sorted keys) of what the target was before and after; "null" when none.
    before = Text()
    after = Text()
    prev_digest = Varchar(length=64)
    digest = Varchar(length=64)


class AuditChain(Table, tablename="audit_chain"):
    """One row: the digest of the newest entry (head) and of the last one pruned (anchor), and the
    admin's retention. Verification starts at the anchor and must end at the head."""

    head_digest = Varchar(length=64, default="")
    head_id = Integer(default=0)
    anchor_digest = Varchar(length=64, default="")
    pruned = Integer(default=0)
    # Entries older than this many days are pruned; null keeps them for ever.
    retention_days = Integer(null=True, default=None)
