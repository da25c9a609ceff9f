"""Scheduling overhead per task: no-op tasks on simulated workers, against Dask distributed.

Simulated workers (tests/sim_workers.py) speak the real worker protocol over real WebSockets
from this process; their handler answers each task-assign with a task-done at once, with no
outputs. A job is the input task plus a chain of stages, each one task per rank, so a run has
1 + workers x stages tasks. Two shapes: only MapStages (each rank pipelines its own chain, the
scheduler's fastest path) and MapStage/ReduceStage alternating (every reduce waits for the whole
stage before it: a barrier per stage).

The appliance runs pinned to one core and this process (the simulated workers, the HTTP polls)
to the other, so the appliance's CPU time is its own. Measured per run: wall time from
POST /jobs/{id}/runs to the run showing succeeded, the appliance's CPU time over that window
(/proc/<pid>/stat) and this process's. Reference in the same run: Dask distributed on both
cores running the same number of no-op tasks in the same shapes (a chain per rank; with
barriers) and as client.map of independent tasks, in two LocalCluster setups.
Target: >= 5,000 tasks/s and less overhead per task than Dask.

BENCH_PROFILE=FILE runs the appliance under cProfile and writes its stats to FILE (read them
with `python -m pstats FILE`); BENCH_SHAPES=8x500,64x100 picks the ranks x stages measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.wordcount import Foreign, idle_share  # noqa: E402
from tests.sim_workers import SimWorker, cookie_of  # noqa: E402
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
APPLIANCE_CORE = 0
BENCH_CORE = 1

NOOP = "async function (x) { await context.onComplete(); }"
JOB = """
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = %(workers)d;
execution.saveIntermediateOutput = false;
execution.setInputFn(async function input() { return []; });
for (let i = 0; i < %(stages)d; i++) {
  execution.addStage(%(alternate)s && i %% 2 === 1 ? new ReduceStage(%(noop)s) : new MapStage(%(noop)s));
}
execution.start(jobRunner);
"""


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def pin(pid: int, cores: set[int]) -> None:
    """Every thread of a process (new threads inherit from the thread that creates them)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cores)


PROFILE_BOOT = """
import cProfile, os, runpy, signal, sys
profile = cProfile.Profile()
def dump(*_):
    profile.disable()
    profile.dump_stats(os.environ["BENCH_PROFILE"])
    os._exit(0)
signal.signal(signal.SIGTERM, dump)  # uvicorn re-raises SIGTERM once it has shut down
sys.argv = [sys.argv[2], *sys.argv[3:]]
sys.path[0] = os.getcwd()  # as `python -m` has it: the appliance of the working directory
profile.enable()
try:
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
finally:
    dump()
"""


class ProfiledAppliance(Appliance):
    """`peermr serve` under cProfile: stats written to $BENCH_PROFILE when it stops."""

    def __init__(self, data_dir: Path, **kwargs):
        super().__init__(data_dir, **kwargs)
        boot = data_dir.parent / "profile_boot.py"
        boot.write_text(PROFILE_BOOT)
        self.wrapper = data_dir.parent / "python-under-cprofile"
        self.wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {boot} "$@"\n')
        self.wrapper.chmod(0o755)

    def start(self, timeout: float = 60) -> Appliance:
        python, sys.executable = sys.executable, str(self.wrapper)
        try:
            return super().start(timeout)
        finally:
            sys.executable = python


class NoopWorker(SimWorker):
    """Answers every task-assign with a task-done at once (a streaming reduce once its last
    task-input came, as a page runs it), and the connectivity probe with an answer that fails it at
    once (a simulated worker has no WebRTC; an unanswered probe holds a slot 20 s)."""

    def __init__(self, *args, tally: Tally, **kwargs):
        super().__init__(*args, **kwargs)
        self.tally = tally
        self.awaiting: dict[str, set[int]] = {}  # streaming reduce -> the producers still to come

    async def finish(self, task_id: str) -> None:
        await self.send({"type": "task-done", "taskId": task_id, "outputs": [], "emits": 0, "cpuMs": 0})
        self.tally.done()

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for raw in self.ws:
                message = json.loads(raw)
                kind, task_id = message["type"], message.get("taskId")
                if kind == "task-assign" and message.get("awaiting"):
                    self.awaiting[task_id] = set(message["awaiting"])
                elif kind == "task-input" and task_id in self.awaiting:
                    self.awaiting[task_id].discard(message["producer"])
                    if not self.awaiting[task_id]:
                        del self.awaiting[task_id]
                        await self.finish(task_id)
                elif kind == "task-assign":
                    await self.finish(task_id)
                elif kind == "ping":
                    await self.send({"type": "pong", "id": message["id"]})
                elif kind == "probe-offer":
                    await self.send({"type": "probe-answer", "replyTo": message["id"], "sdp": "v=0\r\n"})


class Tally:
    """Counts the task-done messages sent; all_done is set at the last one of a run."""

    def __init__(self) -> None:
        self.expected = self.count = 0
        self.last = 0.0
        self.all_done = asyncio.Event()

    def expect(self, tasks: int) -> None:
        self.expected, self.count, self.last = tasks, 0, 0.0
        self.all_done.clear()

    def done(self) -> None:
        self.count += 1
        if self.count == self.expected:
            self.last = time.perf_counter()
            self.all_done.set()


async def ended(api: httpx.AsyncClient, run_id: int) -> dict:
    """The run once it ended (its start is stored after its first tasks began: it may still read as queued)."""
    while True:
        run = (await api.get(f"/runs/{run_id}")).json()
        if run["state"] not in ("queued", "running"):
            return run
        await asyncio.sleep(0.01)


async def one_run(api: httpx.AsyncClient, job_id: int, tasks: int, tally: Tally, pid: int) -> dict:
    tally.expect(tasks)
    cpu_app, cpu_self = cpu_seconds(pid), time.process_time()
    started = time.perf_counter()
    response = await api.post(f"/jobs/{job_id}/runs", json={})
    response.raise_for_status()
    run_id = response.json()["id"]
    await asyncio.wait_for(tally.all_done.wait(), 600)
    cpu_app_tasks = cpu_seconds(pid) - cpu_app
    run = await ended(api, run_id)
    wall = time.perf_counter() - started
    if run["state"] != "succeeded":
        raise RuntimeError(f"run {run_id} {run['state']}: {run['reason']}")
    return {
        "tasks": tasks,
        "wall": wall,
        "window": tally.last - started,  # POST -> last task-done sent
        "cpu_app": cpu_seconds(pid) - cpu_app,
        "cpu_app_tasks": cpu_app_tasks,
        "cpu_self": time.process_time() - cpu_self,
    }


async def measure_ours(appliance: Appliance, cookie: str, token: str, plans: list[tuple[int, int, bool]]) -> list:
    results = []
    tally = Tally()
    api = httpx.AsyncClient(
        base_url=appliance.url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=600
    )
    pid = appliance.proc.pid
    for workers, stages, alternate in plans:
        sims = [NoopWorker(appliance.url, cookie, tally=tally) for _ in range(workers)]
        await asyncio.gather(*(w.start() for w in sims))
        await asyncio.sleep(1 + workers / 16)  # every probe answered and failed
        script = JOB % {"workers": workers, "stages": stages, "alternate": str(alternate).lower(), "noop": NOOP}
        job = await api.post("/jobs", json={"name": f"noop-{workers}-{stages}-{alternate}", "script": script})
        job.raise_for_status()
        warm = (JOB % {"workers": workers, "stages": 2, "alternate": "true", "noop": NOOP}).strip()
        warm_job = (await api.post("/jobs", json={"name": "warm-up", "script": warm})).json()["id"]
        await one_run(api, warm_job, 1 + workers * 2, tally, pid)
        result = await one_run(api, job.json()["id"], 1 + workers * stages, tally, pid)
        results.append({"workers": workers, "stages": stages, "alternate": alternate, **result})
        for w in sims:
            await w.close()
        await asyncio.sleep(0.5)
    await api.aclose()
    return results


# ------------------------------------------------------------------ Dask


def noop(*args) -> None:
    return None


def dask_graph(workers: int, stages: int, alternate: bool) -> tuple[dict, list]:
    graph: dict = {"input": (noop,)}
    previous = ["input"] * workers
    for s in range(stages):
        barrier = alternate and s % 2 == 1
        keys = [f"s{s}-r{r}" for r in range(workers)]
        for r, key in enumerate(keys):
            graph[key] = (noop, list(previous)) if barrier else (noop, previous[r])
        previous = keys
    return graph, previous


def timed(run, tasks: int) -> dict:
    cpu_self = time.process_time()
    started = time.perf_counter()
    run()
    return {"tasks": tasks, "wall": time.perf_counter() - started, "cpu_self": time.process_time() - cpu_self}


def measure_dask(setups: list[tuple[str, dict]], plans: list[tuple[int, int, bool]]) -> list:
    """The scheduler runs in this process (LocalCluster), so its CPU time is this process's."""
    from dask.distributed import Client, LocalCluster, wait

    results = []
    independent = max(1 + w * s for w, s, _ in plans)
    for label, options in setups:
        with LocalCluster(dashboard_address=None, **options) as cluster, Client(cluster) as client:
            graph, keys = dask_graph(4, 4, True)
            client.get(graph, keys)  # warm-up
            for workers, stages, alternate in plans:
                graph, keys = dask_graph(workers, stages, alternate)
                result = timed(lambda g=graph, k=keys: client.get(g, k), len(graph))
                results.append({"setup": label, "shape": shape(workers, stages, alternate), **result})
            result = timed(lambda: wait(client.map(noop, range(independent), pure=False)), independent)
            results.append({"setup": label, "shape": f"client.map of {independent} independent no-ops", **result})
    return results


def shape(workers: int, stages: int, alternate: bool) -> str:
    kind = "map/reduce alternating" if alternate else "map chain"
    return f"{workers} ranks x {stages} stages, {kind}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer stages: a smoke run")
    args = parser.parse_args()
    stages = {8: 40, 64: 10} if args.quick else {8: 500, 64: 100}
    if os.environ.get("BENCH_SHAPES"):
        stages = dict(tuple(int(n) for n in s.split("x")) for s in os.environ["BENCH_SHAPES"].split(","))
    plans = [(w, s, alternate) for w, s in stages.items() for alternate in (False, True)]

    idle = idle_share()
    both = os.sched_getaffinity(0)
    if len(both) < 2:
        raise SystemExit("this bench needs two cores: one for the appliance, one for the simulated workers")
    with tempfile.TemporaryDirectory() as tmp:
        os.sched_setaffinity(0, {APPLIANCE_CORE})  # the appliance inherits it
        env = {"PEERMR_LOG_LEVEL": "warning"}
        data = Path(tmp) / "data"
        appliance = (ProfiledAppliance if os.environ.get("BENCH_PROFILE") else Appliance)(data, env=env).start()
        pin(os.getpid(), {BENCH_CORE})
        try:
            pin(appliance.proc.pid, {APPLIANCE_CORE})
            token = appliance.cli("token", "create", ADMIN_EMAIL).stdout.strip().split()[-1]
            client = appliance.client()
            client.login(ADMIN_EMAIL, ADMIN_PASSWORD)
            with Foreign() as foreign_ours:
                ours = asyncio.run(measure_ours(appliance, cookie_of(client), token, plans))
        finally:
            appliance.stop()
    pin(os.getpid(), both)

    setups = [
        ("processes=False, 1 worker x 2 threads", {"processes": False, "n_workers": 1, "threads_per_worker": 2}),
        ("2 worker processes x 1 thread", {"processes": True, "n_workers": 2, "threads_per_worker": 1}),
    ]
    with Foreign() as foreign_dask:
        dask = measure_dask(setups, plans)
    report(ours, dask, idle, foreign_ours.cores, foreign_dask.cores)


def report(ours: list[dict], dask: list[dict], idle: float, foreign_ours: float, foreign_dask: float) -> None:
    print(f"cores: appliance 1 (CPU {APPLIANCE_CORE}), simulated workers + polls 1 (CPU {BENCH_CORE}); Dask 2")
    print(
        f"machine idle when the bench started: {idle:.0%}; CPU used by processes outside this bench: "
        f"{foreign_ours:.2f} cores during ours, {foreign_dask:.2f} during Dask (other work skews the figures)"
    )
    print()
    print(
        "PeerMR (wall = POST run -> GET shows succeeded; CPU per task over that window; last done = the last\n"
        "task-done a simulated worker sent; end = the run showing succeeded)"
    )
    head = f"{'shape':44} {'tasks':>6} {'wall s':>7} {'tasks/s':>8} {'wall us/task':>12} {'appl CPU us/task':>16}"
    print(head + f" {'sims CPU us/task':>16} {'tasks/s to last done':>20} {'last done -> end s':>18}")
    for r in ours:
        print(
            f"{shape(r['workers'], r['stages'], r['alternate']):44} {r['tasks']:>6} {r['wall']:>7.2f} "
            f"{r['tasks'] / r['wall']:>8.0f} {r['wall'] / r['tasks'] * 1e6:>12.0f} "
            f"{r['cpu_app'] / r['tasks'] * 1e6:>16.0f} {r['cpu_self'] / r['tasks'] * 1e6:>16.0f} "
            f"{r['tasks'] / r['window']:>20.0f} {r['wall'] - r['window']:>18.2f}"
        )
    print()
    print(
        "Dask distributed LocalCluster (wall = submit -> results; CPU of this process = client + scheduler,"
        " + the worker threads with processes=False)"
    )
    print(
        f"{'setup':38} {'shape':44} {'tasks':>6} {'wall s':>7} {'tasks/s':>8} {'wall us/task':>12} "
        f"{'sched CPU us/task':>17}"
    )
    for r in dask:
        print(
            f"{r['setup']:38} {r['shape']:44} {r['tasks']:>6} {r['wall']:>7.2f} {r['tasks'] / r['wall']:>8.0f} "
            f"{r['wall'] / r['tasks'] * 1e6:>12.0f} {r['cpu_self'] / r['tasks'] * 1e6:>17.0f}"
        )
    print()
    print("ratios, ours / the better Dask setup for the same shape (below 1: less overhead than Dask)")
    met = True
    for r in ours:
        name = shape(r["workers"], r["stages"], r["alternate"])
        refs = [d for d in dask if d["shape"] == name]
        best_wall = min(refs, key=lambda d: d["wall"] / d["tasks"])
        best_cpu = min(refs, key=lambda d: d["cpu_self"] / d["tasks"])
        wall = (r["wall"] / r["tasks"]) / (best_wall["wall"] / best_wall["tasks"])
        cpu = (r["cpu_app"] / r["tasks"]) / (best_cpu["cpu_self"] / best_cpu["tasks"])
        met = met and wall < 1 and r["tasks"] / r["wall"] >= 5000
        print(f"  {name:44} wall per task {wall:5.2f}   CPU per task (appliance vs scheduler process) {cpu:5.2f}")
    rate = min(r["tasks"] / r["wall"] for r in ours)
    print(
        f"target: >= 5000 tasks/s in every shape (slowest: {rate:.0f}) and less wall per task than Dask "
        f"-> {'met' if met else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
