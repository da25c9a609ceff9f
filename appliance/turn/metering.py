"""Relayed bytes into the database (at least once a minute, and when an allocation ends) and /metrics."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Iterable

import msgspec
from piccolo.query.functions.aggregate import Sum
from prometheus_client import Counter, Gauge

from appliance.background import BackgroundTasks
from appliance.clock import now
from appliance.turn.allocation import Allocation
from appliance.turn.tables import RelayUsage

FLUSH_INTERVAL = 30.0
RELAYED = Counter("peermr_turn_relayed_bytes_total", "Payload bytes relayed by TURN", ["direction"])
ALLOCATIONS = Gauge("peermr_turn_allocations", "Live TURN allocations")


def _address(five_tuple_part: tuple[str, int] | None, protocol: str = "") -> str:
    if five_tuple_part is None:
        return ""
    host, port = five_tuple_part
    host = f"[{host}]" if ":" in host else host
    return f"{protocol + ' ' if protocol else ''}{host}:{port}"


class Meter:
    """Moves byte counts from live allocations into RelayUsage rows."""

    def __init__(self, allocations: Callable[[], Iterable[Allocation]]):
        self._allocations = allocations
        self._ended: list[Allocation] = []
        self._lock = asyncio.Lock()
        self._flushes = BackgroundTasks("TURN meter")

    def start(self) -> None:
        # A failed flush keeps its counts for the next one (the database may be briefly unavailable).
        self._flushes.every(FLUSH_INTERVAL, self.flush)

    async def stop(self) -> None:
        await self._flushes.drain(5)
        await self.flush()
        await self._flushes.cancel()

    def allocation_ended(self, allocation: Allocation) -> None:
        self._ended.append(allocation)
        self._flushes.spawn(self.flush())

    async def flush(self) -> None:
        async with self._lock:
            ended, self._ended = self._ended, []
            live = list(self._allocations())
            ALLOCATIONS.set(len(live))
            try:
                for allocation in [*live, *ended]:
                    await self._record(allocation, ended=allocation in ended)
            except Exception:
                self._ended = ended + self._ended
                raise

    async def _record(self, allocation: Allocation, ended: bool) -> None:
        to_peer = allocation.bytes_to_peer - allocation.metered_to_peer
        from_peer = allocation.bytes_from_peer - allocation.metered_from_peer
        if allocation.recorded and not (to_peer or from_peer or ended):
            return
        stamp = now()
        values = {
            RelayUsage.bytes_to_peer: allocation.bytes_to_peer,
            RelayUsage.bytes_from_peer: allocation.bytes_from_peer,
            RelayUsage.updated_at: stamp,
        }
        if ended:
            values[RelayUsage.ended_at] = stamp
        updated = (
            await RelayUsage.update(values).where(RelayUsage.allocation_id == allocation.id).returning(RelayUsage.id)
        )
        if not updated:
            await RelayUsage.insert(
                RelayUsage(
                    allocation_id=allocation.id,
                    account=allocation.identity.account,
                    run=allocation.identity.run,
                    client=_address(allocation.five_tuple.client, allocation.five_tuple.protocol),
                    relay=_address(allocation.relay_address),
                    started_at=dt.datetime.fromtimestamp(allocation.started, dt.UTC),
                    updated_at=stamp,
                    ended_at=stamp if ended else None,
                    bytes_to_peer=allocation.bytes_to_peer,
                    bytes_from_peer=allocation.bytes_from_peer,
                )
            )
        RELAYED.labels("to_peer").inc(to_peer)
        RELAYED.labels("from_peer").inc(from_peer)
        allocation.metered_to_peer += to_peer
        allocation.metered_from_peer += from_peer
        allocation.recorded = True


async def totals_since(since: dt.datetime) -> dict[str, tuple[int, int]]:
    """Bytes (to peers, from peers) per account in allocations active since ``since``."""
    rows = await (
        RelayUsage.select(
            RelayUsage.account,
            Sum(RelayUsage.bytes_to_peer).as_alias("to_peer"),
            Sum(RelayUsage.bytes_from_peer).as_alias("from_peer"),
        )
        .where(RelayUsage.updated_at >= since)
        .group_by(RelayUsage.account)
    )
    return {r["account"]: (int(r["to_peer"] or 0), int(r["from_peer"] or 0)) for r in rows}


async def relayed_total() -> int:
    """Payload bytes relayed so far in both directions, as last written (the Overview plots its growth)."""
    row = await RelayUsage.select(
        Sum(RelayUsage.bytes_to_peer).as_alias("to_peer"), Sum(RelayUsage.bytes_from_peer).as_alias("from_peer")
    ).first()
    return int(row["to_peer"] or 0) + int(row["from_peer"] or 0) if row else 0


class AllocationTotal(msgspec.Struct, frozen=True):
    """One allocation's cumulative relayed payload bytes (both directions) as last written, for billing."""

    allocation_id: str
    account: str
    run: str | None
    bytes: int
    updated_at: dt.datetime


async def allocation_totals(since: dt.datetime | None = None) -> list[AllocationTotal]:
    """Every allocation's row last written at or after ``since`` (all of them without it)."""
    query = RelayUsage.select(
        RelayUsage.allocation_id,
        RelayUsage.account,
        RelayUsage.run,
        RelayUsage.bytes_to_peer,
        RelayUsage.bytes_from_peer,
        RelayUsage.updated_at,
    )
    if since is not None:
        query = query.where(RelayUsage.updated_at >= since)
    return [
        AllocationTotal(
            r["allocation_id"], r["account"], r["run"], r["bytes_to_peer"] + r["bytes_from_peer"], r["updated_at"]
        )
        for r in await query.order_by(RelayUsage.id)
    ]


def live_rows(allocations: Iterable[Allocation]) -> list[dict]:
    now = time.time()
    return [
        {
            "account": a.identity.account,
            "run": a.identity.run,
            "client": _address(a.five_tuple.client, a.five_tuple.protocol),
            "relay": _address(a.relay_address),
            "to_peer": a.bytes_to_peer,
            "from_peer": a.bytes_from_peer,
            "age": int(now - a.started),
            "permissions": len(a.permissions),
            "channels": len(a.channels),
        }
        for a in allocations
    ]
