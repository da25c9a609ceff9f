"""A run's parameter server: typed arrays under keys, element-wise updates, stale-synchronous clocks.

The Paracel model: every rank of a group keeps a clock (iterations done). A rank more than
``staleness`` clocks ahead of the slowest rank of its group waits, in ``clock()`` and in reads;
``staleness = 0`` is bulk-synchronous. A rank whose task has ended is not waited for; a rank that
lost its worker, or has not started yet, is (a replacement starts again from the clock the rank had
when its task began, and redoes those iterations). Keys are scoped to the run and group; values live in memory while
the run lasts and are kept on the appliance when it ends (jobs/parameters.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

# The typed arrays of the protocol, little-endian.
DTYPES = {
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
    "int8": np.dtype("i1"),
    "int16": np.dtype("<i2"),
    "int32": np.dtype("<i4"),
    "uint8": np.dtype("u1"),
    "uint16": np.dtype("<u2"),
    "uint32": np.dtype("<u4"),
}

# Element-wise updates ``stored = op(stored, delta)``; integers wrap as JavaScript's typed arrays do.
UPDATES = {
    "add": np.add,
    "max": np.maximum,
    "min": np.minimum,
    "mul": np.multiply,
}


class ParameterError(Exception):
    """A request the parameter server refuses; the message goes back to the job."""


@dataclass
class Parameter:
    dtype: str
    value: np.ndarray
    version: int = 1


@dataclass
class GroupClocks:
    clocks: list[int]
    # Ranks whose task has ended: the others do not wait for them.
    resting: set[int] = field(default_factory=set)
    # The clock each rank had when its current task began (a replacement starts from there).
    started_at: list[int] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def slowest(self, besides: int) -> int | None:
        others = [c for rank, c in enumerate(self.clocks) if rank != besides and rank not in self.resting]
        return min(others) if others else None

    def notify(self) -> None:
        # Wake every waiter; each checks its own condition again (ranks are few, clocks move rarely).
        self.changed.set()
        self.changed = asyncio.Event()


class ParameterServer:
    def __init__(self, staleness: int, groups: list[str], worker_count: int, max_bytes: int):
        self.staleness = staleness
        self.max_bytes = max_bytes
        self.bytes = 0
        self.values: dict[tuple[str, str], Parameter] = {}
        self.groups = {g: GroupClocks([0] * worker_count, set(), [0] * worker_count) for g in groups}
        self.changes = 0  # value writes, so a checkpoint is written only when something changed

    # ------------------------------------------------------------ values

    def _store(self, group: str, key: str, dtype: str, value: np.ndarray, version: int) -> int:
        """Keep ``value`` under the key, within the run's memory budget (the old value is given back)."""
        current = self.values.get((group, key))
        grown = self.bytes + value.nbytes - (current.value.nbytes if current else 0)
        if grown > self.max_bytes:
            raise ParameterError(
                f"the run's parameter-server values would take {grown} bytes; "
                f"this appliance allows {self.max_bytes} per run (PEERMR_PS_MAX_BYTES_PER_RUN)"
            )
        self.bytes = grown
        self.values[(group, key)] = Parameter(dtype, value, version)
        self.changes += 1
        return version

    def _decode(self, dtype: str, payload: bytes | memoryview) -> np.ndarray:
        kind = DTYPES[dtype]
        if len(payload) % kind.itemsize:
            raise ParameterError(f"{len(payload)} bytes are not a whole number of {dtype} values")
        return np.frombuffer(payload, dtype=kind).copy()

    def write(self, group: str, key: str, dtype: str, payload: bytes | memoryview, if_version: int | None) -> int:
        """Store a value; with ``if_version`` only when the stored version is that one (0: no value yet)."""
        current = self.values.get((group, key))
        if if_version is not None and (current.version if current else 0) != if_version:
            raise ParameterError("version")
        return self._store(group, key, dtype, self._decode(dtype, payload), current.version + 1 if current else 1)

    def update(self, group: str, key: str, dtype: str, op: str, payload: bytes | memoryview) -> int:
        """Apply ``op`` element-wise (``replace`` stores the delta); a missing key starts from the delta."""
        delta = self._decode(dtype, payload)
        current = self.values.get((group, key))
        if current is None or op == "replace":
            return self._store(group, key, dtype, delta, current.version + 1 if current else 1)
        if current.dtype != dtype or current.value.shape != delta.shape:
            raise ParameterError(
                f"an update of {key!r} must be {current.value.size} {current.dtype} values "
                f"(it was {delta.size} {dtype} values)"
            )
        UPDATES[op](current.value, delta, out=current.value)
        current.version += 1
        self.changes += 1
        return current.version

    def read(self, group: str, key: str) -> Parameter:
        current = self.values.get((group, key))
        if current is None:
            raise ParameterError(f"no parameter {key!r} in group {group} (write it first)")
        return current

    def restore(self, group: str, key: str, dtype: str, data: bytes, version: int) -> None:
        """A value as a checkpoint kept it (after a restart)."""
        self._store(group, key, dtype, self._decode(dtype, data), version)

    # ------------------------------------------------------------ clocks

    def starting_clocks(self) -> dict[str, list[int]]:
        """Per group, the clock each rank had when its current task began: where its tasks resume."""
        return {group: list(clocks.started_at) for group, clocks in self.groups.items()}

    def resume(self, starting: dict[str, list[int]]) -> None:
        """After a restart the ranks' tasks run again from the clocks they began at."""
        for group, clocks in starting.items():
            if group in self.groups:
                self.groups[group].clocks = list(clocks)
                self.groups[group].started_at = list(clocks)

    def task_started(self, group: str, rank: int, replacement: bool) -> None:
        clocks = self.groups[group]
        if replacement:
            clocks.clocks[rank] = clocks.started_at[rank]
        clocks.started_at[rank] = clocks.clocks[rank]
        clocks.resting.discard(rank)
        clocks.notify()

    def task_ended(self, group: str, rank: int) -> None:
        clocks = self.groups[group]
        clocks.resting.add(rank)
        clocks.notify()

    def rank_lost(self, group: str, rank: int) -> None:
        """The rank's worker left: the others wait for its replacement (it is not resting)."""
        clocks = self.groups[group]
        clocks.resting.discard(rank)
        clocks.notify()

    def tick(self, group: str, rank: int) -> int:
        clocks = self.groups[group]
        clocks.clocks[rank] += 1
        clocks.notify()
        return clocks.clocks[rank]

    def clock_of(self, group: str, rank: int) -> int:
        return self.groups[group].clocks[rank]

    async def within_staleness(self, group: str, rank: int) -> None:
        """Return once this rank is at most ``staleness`` clocks ahead of the slowest other rank."""
        clocks = self.groups[group]
        while True:
            slowest = clocks.slowest(besides=rank)
            if slowest is None or clocks.clocks[rank] - slowest <= self.staleness:
                return
            await clocks.changed.wait()
