"""Parameter-server values after the run: kept when it ends, listed and downloaded through the API."""

from __future__ import annotations

import re
from dataclasses import dataclass

import msgspec
import numpy as np

from appliance.accounts.actor import Actor
from appliance.errors import NotFound
from appliance.jobs.access import run_row
from appliance.jobs.paramserver import DTYPES, ParameterServer
from appliance.jobs.tables import RunParameter


@dataclass
class ParameterInfo:
    group: str
    key: str
    dtype: str
    length: int
    version: int


async def keep(run_id: int, params: ParameterServer | None) -> None:
    """Write the run's values (every outcome keeps them: a failed run's are a checkpoint; while it
    runs, the coordinator writes them too, so a restart resumes from them)."""
    if params is None or not params.values:
        return
    rows = [
        RunParameter(
            run=run_id,
            group=group,
            key=key,
            dtype=value.dtype,
            length=int(value.value.size),
            version=value.version,
            value=value.value.tobytes(),
        )
        for (group, key), value in sorted(params.values.items())
    ]
    async with RunParameter._meta.db.transaction():
        await RunParameter.delete().where(RunParameter.run == run_id)
        await RunParameter.insert(*rows)


async def restore(run_id: int, params: ParameterServer) -> int:
    """Put back the values last kept for the run (after a restart); returns how many."""
    rows = await RunParameter.select(
        RunParameter.group, RunParameter.key, RunParameter.dtype, RunParameter.value, RunParameter.version
    ).where(RunParameter.run == run_id)
    for row in rows:
        params.restore(row["group"], row["key"], row["dtype"], bytes(row["value"]), row["version"])
    return len(rows)


async def list_parameters(actor: Actor, run_id: int) -> list[ParameterInfo]:
    await run_row(actor, run_id)
    rows = (
        await RunParameter.select(
            RunParameter.group, RunParameter.key, RunParameter.dtype, RunParameter.length, RunParameter.version
        )
        .where(RunParameter.run == run_id)
        .order_by(RunParameter.group)
        .order_by(RunParameter.key)
    )
    return [ParameterInfo(r["group"], r["key"], r["dtype"], r["length"], r["version"]) for r in rows]


async def parameter_value(actor: Actor, run_id: int, group: str, key: str) -> tuple[str, bytes]:
    """(dtype, little-endian bytes) of one value."""
    await run_row(actor, run_id)
    row = (
        await RunParameter.select(RunParameter.dtype, RunParameter.value)
        .where((RunParameter.run == run_id) & (RunParameter.group == group) & (RunParameter.key == key))
        .first()
    )
    if row is None:
        raise NotFound(f"Run {run_id} has no parameter {key!r} in group {group} (values are kept when a run ends).")
    return row["dtype"], bytes(row["value"])


@dataclass(frozen=True)
class ValueFile:
    """A value as a file to download."""

    body: bytes
    media_type: str
    filename: str


def value_file(run_id: int, group: str, key: str, dtype: str, data: bytes, format: str) -> ValueFile:
    """The value's little-endian bytes, or a JSON array (``format=json``), named after the run, group and key."""
    # A key is job code's text: only plain characters reach the file name, the rest become '_'.
    name = re.sub(r"[^A-Za-z0-9._-]", "_", f"run-{run_id}-{group}-{key.strip('/')}")
    if format == "json":
        values = np.frombuffer(data, dtype=DTYPES[dtype]).tolist()
        return ValueFile(msgspec.json.encode(values), "application/json", f"{name}.json")
    return ValueFile(data, "application/octet-stream", f"{name}.{dtype}")
