"""Which connected workers may run a run's tasks, in what order, and why a run waits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from appliance.fleet.registry import Worker
from appliance.jobs.spec import JobSpec


@dataclass(frozen=True)
class FleetCounts:
    """The connected workers (paused ones too) as someone about to start a run sees them."""

    connected: int
    idle: int
    own: int  # of the account starting the run (what private mode may use)
    gpu: int  # with a WebGPU adapter that counts as a GPU (software ones only when the admin allows)
    paused: str = ""  # fleet/presence.py: "both paused: this computer is busy ..."

    def describe(self) -> str:
        if not self.connected:
            return "No worker is connected right now: a run waits in the queue until enough are."
        paused = f", {self.paused}" if self.paused else ""
        return (
            f"Connected now: {self.connected} worker{'s' if self.connected != 1 else ''} ({self.idle} idle{paused}), "
            f"{self.own} of them yours (all private mode may use), {self.gpu} with WebGPU."
        )


def has_gpu(worker: Worker, software_gpus: bool) -> bool:
    """A WebGPU adapter that is a GPU: a software one (SwiftShader and the like) only when allowed."""
    gpu = worker.capabilities.gpu
    return gpu is not None and (software_gpus or not gpu.software)


def meets_gpu(worker: Worker, spec: JobSpec, software_gpus: bool = False) -> bool:
    """A GPU when asked for (has_gpu); info values equal, features present, limits at least those asked."""
    if not spec.gpu:
        return True
    gpu = worker.capabilities.gpu
    if gpu is None or not has_gpu(worker, software_gpus):
        return False
    wanted = spec.gpu_requirements
    if any(gpu.info.get(name) != value for name, value in wanted.info.items()):
        return False
    if not set(wanted.features) <= set(gpu.features):
        return False
    return all(gpu.limits.get(name, 0) >= value for name, value in wanted.limits.items())


def eligible(worker: Worker, spec: JobSpec, owner_id: int, software_gpus: bool = False) -> bool:
    """May run this run's tasks at all (idle or not)."""
    if spec.private_mode and worker.account_id != owner_id:
        return False
    return meets_gpu(worker, spec, software_gpus)


def available(worker: Worker) -> bool:
    return not worker.paused and not worker.busy


# Courtesy on employees' machines: plugged in before unknown before on battery, and a CPU under no
# pressure before one its owner is using (a tab on battery or under serious pressure pauses itself).
POWER_ORDER = {"plugged": 0, "unknown": 1, "battery": 2}
PRESSURE_ORDER = {"nominal": 0, "unknown": 1, "fair": 1, "serious": 2, "critical": 3}


def ranked(workers: list[Worker], speed: Callable[[str], float] | None = None) -> list[Worker]:
    """Plugged-in and unpressured devices first; then the highest score, the fastest (``speed``: a
    browser's speed estimate from its finished tasks, engine/speeds.py), visible tabs (hidden ones are
    throttled), more capacity (the tab's share of its cores), longest connected."""

    def key(w: Worker):
        caps = w.capabilities
        return (
            POWER_ORDER[caps.power],
            PRESSURE_ORDER[caps.pressure],
            -w.score,
            -speed(w.worker_id) if speed else 0.0,
            caps.visibility != "visible",
            -(caps.capacity or caps.cores),
            w.connected_at,
        )

    return sorted(workers, key=key)


def needed(spec: JobSpec) -> int:
    return spec.worker_count * spec.group_count


def describe_need(spec: JobSpec, count: int) -> str:
    what = f"{count} idle worker{'s' if count != 1 else ''}"
    if spec.gpu:
        what += " with WebGPU"
        if spec.gpu_requirements.features or spec.gpu_requirements.limits or spec.gpu_requirements.info:
            what += " meeting the run's GPU requirements"
    if spec.private_mode:
        what += " of the run's own account (private mode)"
    return what


def capacity_note(spec: JobSpec, connected: int, eligible: int, paused: str = "") -> str:
    """What a run asks against what the fleet has, e.g. "asks 8, 3 connected, 2 eligible with WebGPU",
    "asks 4, 2 connected (both paused: this computer is busy), 0 eligible"; empty when enough eligible
    workers are connected (busy or not). Paused workers are connected but not eligible."""
    if eligible >= needed(spec):
        return ""
    qualifier = describe_need(spec, 0).removeprefix("0 idle workers").strip()
    paused = f" ({paused})" if paused else ""
    return (
        f"asks {needed(spec)}, {connected} connected{paused}, {eligible} eligible{' ' + qualifier if qualifier else ''}"
    )


def wait_reason(spec: JobSpec, idle_free: int, held_back: int, busy: int) -> str:
    """Why a queued run that the connected workers could run has not started, and by which rule, e.g.
    "needs 8 idle workers with WebGPU, 3 eligible idle, 5 eligible busy (queue order: ...)"."""
    reason = f"needs {describe_need(spec, needed(spec))}, {idle_free} eligible idle"
    if held_back:
        reason += f" ({held_back} more kept for runs queued earlier)"
    if busy:
        reason += f", {busy} eligible busy"
        if not held_back:
            reason += " (queue order: it gets them first as they free up)"
    return reason


def short_reason(spec: JobSpec, connected: int, eligible: int, paused: str = "") -> str:
    """Why a run waits that could not start even if every connected worker were idle."""
    more = "the paused ones to resume or more workers to connect" if paused else "more workers to connect"
    note = capacity_note(spec, connected, eligible, paused)
    return f"{note}: waits for {more} (runs queued later may start meanwhile)"


def software_gpu_note(spec: JobSpec, workers: list[Worker], software_gpus: bool) -> str:
    """Why workers with WebGPU do not count for a GPU run: their adapter is a software one."""
    if not spec.gpu or software_gpus:
        return ""
    software = sum(1 for w in workers if w.capabilities.gpu is not None and w.capabilities.gpu.software)
    if not software:
        return ""
    return (
        f"; {software} connected worker(s) have a software WebGPU adapter only, which is not a GPU "
        "unless an admin allows it (Admin → Settings)"
    )


def fair_share_reason(held: int, limit: int, share: float, need: int) -> str:
    return (
        f"fair share: the account's runs hold {held} worker(s); {need} more would pass its limit of {limit} "
        f"({share:.0%} of the connected workers) while another account's run waits"
    )
