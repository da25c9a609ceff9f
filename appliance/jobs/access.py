"""Who may see a run: its owner and admins (everyone else is told there is no such run); and the
coordinator the jobs routes reach through the app."""

from __future__ import annotations

from typing import TYPE_CHECKING

from litestar import Request

from appliance.accounts.actor import Actor
from appliance.errors import NotFound
from appliance.jobs.tables import Run

if TYPE_CHECKING:
    from appliance.jobs.engine.coordinator import Coordinator


async def run_row(actor: Actor, run_id: int) -> dict:
    row = await Run.select().where(Run.id == run_id).first()
    if row is None or (row["owner"] != actor.user_id and not actor.is_admin):
        raise NotFound(f"No run {run_id}.")
    return row


def coordinator_of(request: Request) -> Coordinator:
    """The app's coordinator, for the REST, dashboard and sandbox routes."""
    return request.app.state.coordinator
