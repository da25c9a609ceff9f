"""Meters: what the other domains report, turned into ledger entries under the PeerMR rules.

Rules (docs/architecture.md, "Billing"):
- a private-mode run (and a private PMRFS bucket, whose blobs only its owner's browsers hold) is
  billed for TURN relay bytes only: no CPU, GPU, peer-to-peer or storage charge, and its browsers
  are paid nothing;
- an account's own browsers are never paid for its own runs or its own objects (the consumer
  side is still charged on a non-private run: the work was done).

Sources (each entry's idempotency key) and where the figures come from:
- runs (``run_ended``, on the coordinator's ``RunEnded`` event): the task attempts that
  completed (state ``done``), their execution milliseconds as the browser reported them, and those
  a backup attempt beat (``superseded``), their wall time as the coordinator saw it. A GPU run's
  milliseconds are metered as ``gpu_ms`` instead of ``cpu_ms``. One consumer entry per run and
  resource (``run:<id>:consumer:<resource>``), one provider entry per worker account
  (``run:<id>:provider:<account>:<resource>``). Dated when the run ended.
- peer-to-peer transfers (``TransferMeter``, on the fleet's ``TransferFinished``): a finished transfer that carries a
  ``TransferTag`` (the account it ran for). Both ends report the bytes they moved; the smaller
  report counts. The consumer is charged ingress plus egress (2 × counted), each end's account is
  credited what it moved (``p2p:<transfer>:consumer|egress|ingress``).
- PMRFS storage (``sample_storage``, hourly): the bytes of every confirmed replica on a connected
  browser, for the hour starting at the sample's hour (byte-hours). A blob is charged to the owner of
  the oldest bucket that references it, credited to the holder's account (the live fleet maps the
  holder's worker id to its account). Browsers that are not connected earn nothing: their replicas
  cannot serve. The appliance's own copies are not metered. ``storage:<hour>:<owner>:<worker>:...``.
- TURN relay (``sweep_turn``, every few minutes and before a period closes): each allocation's
  cumulative bytes (both directions) from ``turn_relay_usage``; the increase since the last sweep is
  recorded (``turn:<allocation>:<cumulative bytes>``), charged to the run's owner when the
  credential names a run, otherwise to the account it names. Dated when the TURN meter wrote it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Mapping
from zoneinfo import ZoneInfo

import msgspec

from appliance.background import BackgroundTasks
from appliance.billing import ledger, periods
from appliance.billing.ledger import CONSUMER, PROVIDER, Entry
from appliance.billing.tables import ClosedPeriod, TurnCursor, UsageEntry
from appliance.clock import now
from appliance.events import RunEnded, TransferFinished
from appliance.jobs import service as jobs
from appliance.pmrfs import namenode
from appliance.turn import metering

log = logging.getLogger(__name__)

# How long to wait for the second end's byte report after a transfer finished.
REPORT_GRACE_SECONDS = 10.0


# ------------------------------------------------------------------ runs


class TaskUsage(msgspec.Struct, frozen=True):
    """One task attempt of a run: who ran it, how it ended, its execution milliseconds."""

    worker_id: str
    worker_account: int | None
    state: str
    cpu_ms: int


def run_entries(
    run_id: int, owner: int, tasks: list[TaskUsage], *, private: bool, gpu: bool, at: dt.datetime
) -> list[Entry]:
    if private:
        return []  # private mode: only TURN relay bytes are billed
    resource = "gpu_ms" if gpu else "cpu_ms"
    # Completed attempts, and attempts that lost a race to a backup (speculation): both were work done.
    done = [t for t in tasks if t.state in ("done", "superseded") and t.cpu_ms > 0]
    entries = []
    consumed = sum(t.cpu_ms for t in done)
    if consumed:
        entries.append(Entry(owner, resource, CONSUMER, consumed, f"run:{run_id}:consumer:{resource}", at, run_id))
    earned: dict[int, int] = {}
    for task in done:
        if task.worker_account is not None and task.worker_account != owner:
            earned[task.worker_account] = earned.get(task.worker_account, 0) + task.cpu_ms
    for account, quantity in sorted(earned.items()):
        entries.append(
            Entry(account, resource, PROVIDER, quantity, f"run:{run_id}:provider:{account}:{resource}", at, run_id)
        )
    return entries


async def meter_run(
    run_id: int,
    owner: int,
    tasks: list[TaskUsage],
    *,
    private: bool,
    gpu: bool,
    tz: ZoneInfo,
    at: dt.datetime | None = None,
) -> int:
    """Meter a run that ended (any outcome: completed attempts were work done). Idempotent per run."""
    return await ledger.record(run_entries(run_id, owner, tasks, private=private, gpu=gpu, at=at or now()), tz)


async def run_ended(event: RunEnded, tz: ZoneInfo) -> None:
    """The ``RunEnded`` subscriber (with the appliance time zone bound): every attempt ran on a worker that
    held a rank, so ``accounts`` knows its account."""
    tasks = [TaskUsage(a.worker_id, event.accounts.get(a.worker_id), a.state, a.cpu_ms) for a in event.attempts]
    try:
        await meter_run(event.run_id, event.owner, tasks, private=event.private, gpu=event.gpu, tz=tz)
    except Exception:
        log.exception("run %s: could not record its usage for billing", event.run_id)


# ------------------------------------------------------------------ peer-to-peer transfers


def transfer_entries(transfer, at: dt.datetime) -> list[Entry]:
    """Entries for a finished ``fleet.transfers.Transfer`` or closed ``Link`` (nothing without a tag or both
    reports). A link's bytes went both ways: each end is credited what the smaller report counts."""
    tag = transfer.tag
    counted = transfer.counted_bytes
    if tag is None or tag.private or counted <= 0:
        return []
    entries = [Entry(tag.account, "p2p_bytes", CONSUMER, 2 * counted, f"p2p:{transfer.id}:consumer", at, tag.run)]
    for end, worker_id in (("egress", transfer.source), ("ingress", transfer.target)):
        account = transfer.accounts.get(worker_id)
        if account is not None and account != tag.account:
            entries.append(Entry(account, "p2p_bytes", PROVIDER, counted, f"p2p:{transfer.id}:{end}", at, tag.run))
    return entries


class TransferMeter:
    """Meters each finished transfer once both ends reported (or the grace ran out)."""

    def __init__(self, tz: ZoneInfo, grace: float = REPORT_GRACE_SECONDS):
        self.tz = tz
        self.grace = grace
        self.pending = BackgroundTasks("transfer meter")
        self.stopping = False

    def transfer_finished(self, event: TransferFinished) -> None:
        if event.ok and event.transfer.tag is not None:
            self.pending.spawn(self._meter(event.transfer))

    async def _meter(self, transfer) -> None:
        if not self.stopping:
            await asyncio.sleep(transfer.settle_seconds)  # a link's last reports
        deadline = asyncio.get_running_loop().time() + self.grace
        while len(transfer.reported) < 2 and not self.stopping and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.2)
        try:
            await ledger.record(transfer_entries(transfer, now()), self.tz)
        except Exception:
            log.exception("could not meter transfer %s", transfer.id)

    async def stop(self) -> None:
        """Meter what is still waiting now (with the reports there are), then return."""
        self.stopping = True
        await self.pending.drain(5)


# ------------------------------------------------------------------ PMRFS storage


def _hour(at: dt.datetime) -> dt.datetime:
    return at.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)


async def storage_entries(live: Mapping[str, int], at: dt.datetime | None = None) -> list[Entry]:
    hour = _hour(at or now())
    stamp = hour.strftime("%Y-%m-%dT%H")
    entries = []
    for held in await namenode.browser_replica_bytes():
        holder_account = live.get(held.holder)
        if holder_account is None or held.private or held.bytes <= 0:
            continue
        key = f"storage:{stamp}:{held.owner}:{held.holder}"
        entries.append(Entry(held.owner, "storage_byte_hours", CONSUMER, held.bytes, f"{key}:consumer", hour))
        if holder_account != held.owner:
            entries.append(Entry(holder_account, "storage_byte_hours", PROVIDER, held.bytes, f"{key}:provider", hour))
    return entries


async def sample_storage(live: Mapping[str, int], tz: ZoneInfo, at: dt.datetime | None = None) -> int:
    """Record one hour of storage: ``live`` maps the connected workers' ids to their accounts."""
    return await ledger.record(await storage_entries(live, at), tz)


# ------------------------------------------------------------------ TURN relay


async def _run_owner(run: str | None) -> int | None:
    if not run or not run.isdigit():
        return None
    return await jobs.run_owner(int(run))


async def _turn_since(tz: ZoneInfo) -> dt.datetime | None:
    """Allocations last written before the latest closed period ended were swept when it closed."""
    latest = await ClosedPeriod.select(ClosedPeriod.period).order_by(ClosedPeriod.period, ascending=False).first()
    return periods.bounds(latest["period"], tz)[1] if latest else None


async def turn_entries(tz: ZoneInfo) -> tuple[list[Entry], dict[str, int]]:
    """Entries for relayed bytes not in the ledger yet, and each allocation's new cursor."""
    rows = await metering.allocation_totals(since=await _turn_since(tz))
    if not rows:
        return [], {}
    cursors: dict[str, int] = {}
    ids = [r.allocation_id for r in rows]
    for start in range(0, len(ids), 500):
        for c in await TurnCursor.select().where(TurnCursor.allocation_id.is_in(ids[start : start + 500])):
            cursors[c["allocation_id"]] = c["metered"]
    entries, moved = [], {}
    owners: dict[str, int | None] = {}
    for row in rows:
        delta = row.bytes - cursors.get(row.allocation_id, 0)
        if delta <= 0:
            continue
        if row.run not in owners:
            owners[row.run] = await _run_owner(row.run)
        account = owners[row.run] if owners[row.run] is not None else _int(row.account)
        if account is None:
            continue
        run = int(row.run) if row.run and row.run.isdigit() else None
        entries.append(
            Entry(account, "turn_bytes", CONSUMER, delta, f"turn:{row.allocation_id}:{row.bytes}", row.updated_at, run)
        )
        moved[row.allocation_id] = row.bytes
    return entries, moved


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


async def sweep_turn(tz: ZoneInfo) -> int:
    """Record relayed bytes since the last sweep (idempotent: the cumulative count names each entry)."""
    entries, moved = await turn_entries(tz)
    if not entries:
        return 0
    async with UsageEntry._meta.db.transaction():
        added = await ledger.record(entries, tz)
        for allocation_id, metered in moved.items():
            await TurnCursor.insert(TurnCursor(allocation_id=allocation_id, metered=metered)).on_conflict(
                target=TurnCursor.allocation_id, action="DO UPDATE", values=[TurnCursor.metered]
            )
    return added
