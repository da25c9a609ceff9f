"""Periodic PMRFS clean-up: files an interrupted upload or a crash left behind."""

from __future__ import annotations

from appliance.pmrfs import namenode
from appliance.pmrfs.blobstore import BlobStore
from appliance.scheduler import PeriodicJob


def jobs(store: BlobStore) -> list[PeriodicJob]:
    async def sweep() -> None:
        await namenode.sweep_orphan_files(store)

    return [PeriodicJob("pmrfs.sweep_orphan_files", sweep, "interval", {"hours": 1})]
