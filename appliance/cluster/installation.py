"""The installation's id, shared by every process on its database: it names the Redis channels."""

from __future__ import annotations

from appliance.cluster.tables import Installation


async def installation_id() -> str:
    """Made by the first process that asks; the same for all of them afterwards."""
    await Installation.insert(Installation(one=True)).on_conflict(target=Installation.one, action="DO NOTHING")
    row = await Installation.select(Installation.installation).first()
    return row["installation"].hex
