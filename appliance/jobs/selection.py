"""Which connected workers may run a run's tasks, in what order, and why a run waits."""

from __future__ import annotations

from appliance.fleet.registry import Worker
from appliance.jobs.spec import JobSpec


def meets_gpu(worker: Worker, spec: JobSpec) -> bool:
    """WebGPU present when asked for; info values equal, features present, limits at least those asked."""
    if not spec.gpu:
        return True
    gpu = worker.capabilities.gpu
    if gpu is None:
        return False
    wanted = spec.gpu_requirements
    if any(gpu.info.get(name) != value for name, value in wanted.info.items()):
        return False
    if not set(wanted.features) <= set(gpu.features):
        return False
    return all(gpu.limits.get(name, 0) >= value for name, value in wanted.limits.items())


def eligible(worker: Worker, spec: JobSpec, owner_id: int) -> bool:
    """May run this run's tasks at all (idle or not)."""
    if spec.private_mode and worker.account_id != owner_id:
        return False
    return meets_gpu(worker, spec)


def available(worker: Worker) -> bool:
    return not worker.paused and not worker.busy


def ranked(workers: list[Worker]) -> list[Worker]:
    """Highest score first; then visible tabs (hidden ones are throttled), more cores, longest connected."""
    return sorted(
        workers,
        key=lambda w: (-w.score, w.capabilities.visibility != "visible", -w.capabilities.cores, w.connected_at),
    )


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


def wait_reason(spec: JobSpec, eligible_now: int, held_back: int = 0) -> str:
    """Why a queued run has not started, e.g. "needs 8 idle workers with WebGPU, 3 eligible"."""
    reason = f"needs {describe_need(spec, needed(spec))}, {eligible_now} eligible"
    if held_back:
        reason += f" ({held_back} more kept for runs queued earlier)"
    return reason
