"""The hash chain: each entry's digest covers the previous entry's digest and its own fields, so
changing, deleting or inserting a row breaks the chain from that row on (and the stored head)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

FIELDS = ("at", "actor", "action", "target", "address", "before", "after")


def canonical(value: object) -> str:
    """What is stored (and hashed) for a before or after value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def stamp(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).isoformat(timespec="microseconds")


def digest(prev_digest: str, row: dict) -> str:
    fields = [stamp(row["at"]) if isinstance(row["at"], dt.datetime) else row["at"]]
    fields += [row[name] for name in FIELDS[1:]]
    return hashlib.sha256((prev_digest + "\n" + json.dumps(fields, separators=(",", ":"))).encode()).hexdigest()


@dataclass(frozen=True)
class Verdict:
    ok: bool
    checked: int
    problem: str = ""


def verify(rows: Iterable[dict], anchor: str, head_digest: str, head_id: int) -> Verdict:
    """Walk the entries in id order from the anchor (the last pruned digest) to the stored head."""
    expected = anchor
    checked = 0
    last_id: int | None = None
    for row in rows:
        if row["prev_digest"] != expected:
            return Verdict(False, checked, f"entry #{row['id']}: the entry before it was deleted or one was inserted")
        if digest(row["prev_digest"], row) != row["digest"]:
            return Verdict(False, checked, f"entry #{row['id']}: its content was changed")
        expected, last_id = row["digest"], row["id"]
        checked += 1
    if expected != head_digest or (last_id is not None and last_id != head_id):
        return Verdict(
            False,
            checked,
            f"the chain ends at entry #{last_id} but its head is #{head_id}: entries were deleted",
        )
    return Verdict(True, checked)
