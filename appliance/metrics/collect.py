"""The gauges read at each scrape, from the running appliance: its workers, queue, runs, PMRFS and
accounts. Counters (tasks, failures, bytes moved, TURN) are kept where the events happen."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from prometheus_client import Gauge

from appliance import __version__
from appliance.accounts import users
from appliance.fleet.registry import Fleet
from appliance.jobs import service as jobs
from appliance.pmrfs import namenode

if TYPE_CHECKING:
    from appliance.jobs.engine.coordinator import Coordinator

BUILD_INFO = Gauge("peermr_build_info", "Appliance version", ["version"])
ACCOUNTS = Gauge("peermr_accounts", "Active accounts by role", ["role"])
# By account id, never email: a scrape is read by monitoring tools, which need not know who the employees are.
WORKERS = Gauge(
    "peermr_workers_connected", "Connected worker browsers by account id, WebGPU and state", ["account", "gpu", "state"]
)
WORKER_CAPACITY = Gauge("peermr_worker_capacity", "Concurrent tasks the connected workers offer (their core shares)")
QUEUE_DEPTH = Gauge("peermr_queue_depth", "Runs waiting in the queue")
QUEUE_OLDEST = Gauge("peermr_queue_oldest_wait_seconds", "How long the oldest queued run has waited")
RUNS = Gauge("peermr_runs", "Runs by state", ["state"])
PMRFS_BLOBS = Gauge("peermr_pmrfs_blobs", "Distinct PMRFS blobs")
PMRFS_BYTES = Gauge("peermr_pmrfs_bytes", "Bytes of the distinct PMRFS blobs")
PMRFS_REPLICAS = Gauge("peermr_pmrfs_browser_replicas", "Blob replicas held in worker browsers")


async def refresh(fleet: Fleet, coordinator: Coordinator) -> None:
    BUILD_INFO.labels(__version__).set(1)
    for role, count in (await users.count_by_role()).items():
        ACCOUNTS.labels(role).set(count)
    WORKERS.clear()
    workers = fleet.workers.values()
    counts = Counter((str(w.account_id), "yes" if w.capabilities.gpu else "no", w.state) for w in workers)
    for labels, count in counts.items():
        WORKERS.labels(*labels).set(count)
    WORKER_CAPACITY.set(sum(w.capabilities.capacity or 1 for w in fleet.workers.values()))
    ages = coordinator.read.queue_ages()
    QUEUE_DEPTH.set(len(ages))
    QUEUE_OLDEST.set(max(ages, default=0.0))
    RUNS.clear()
    for state, count in (await jobs.runs_by_state()).items():
        RUNS.labels(state).set(count)
    pmrfs = await namenode.totals()
    PMRFS_BLOBS.set(pmrfs["blobs"])
    PMRFS_BYTES.set(pmrfs["bytes"])
    PMRFS_REPLICAS.set(pmrfs["browser_replicas"])
