"""Past one machine (issue 29): edges and schedulers on PostgreSQL and Redis, with simulated workers.

The cluster is `peermr serve --role scheduler` twice (a leader and a standby) and `--role edge`
N times, on one data dir, one PostgreSQL and one Redis that this bench starts (tests/services.py:
Debian's binaries in a temporary directory). Simulated workers speak the worker protocol over real
WebSockets from client processes of this bench (as bench/fleet_scale.py does for one process):
hello, pongs to the scheduler's pings (every 15 s on an idle worker, through Redis), hello again
on the same socket when its edge asks (another scheduler leads: hello-again), and, like the worker
page, a reconnect with backoff and jitter when their socket closes.

Measured, each against today's one process in the same run where there is one:
- tasks/s: no-op tasks on simulated workers (bench/sched_overhead.py's NoopWorker and job shapes, smaller),
  on the one process on SQLite (today's default), on one process on PostgreSQL (the database the
  cluster needs, without Redis), and on the scheduler behind the edges (sims on the edges, the API
  on the scheduler); CPU per task of each process. Target >= 5,000 tasks/s.
- workers held: --workers over the edges; resident memory of each edge and of the scheduler, per
  worker; the reference is one process holding --reference-workers (it cannot hold 40,000 sockets:
  one process has 20,000 file descriptors here). Target: 4 edges hold >= 40,000, <= 100 KiB each.
  The fleet is held past one 15 s ping round and the scheduler's fleet (GET /metrics,
  peermr_workers_connected) must still count every worker.
- failover: SIGKILL of the leading scheduler with the whole fleet connected; seconds until the
  standby answers 200 on /health/leader, and until its /metrics counts every worker again.
  Target < 10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import re
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.fleet_scale import raise_fd_limit, rss_mib  # noqa: E402
from bench.sched_overhead import JOB, NOOP, NoopWorker, Tally, cpu_seconds, ended  # noqa: E402
from bench.wordcount import Foreign, idle_share  # noqa: E402
from tests.sim_workers import cookie_of  # noqa: E402
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, Client  # noqa: E402

CAPABILITIES = {"cores": 4, "memoryGib": 8, "userAgent": "Mozilla/5.0 Chrome/156.0 Simulated", "gpu": None}
CONNECT_CONCURRENCY = 64  # per client process
GRACE = "3"


# ------------------------------------------------------------------ client processes


class Sim:
    """One simulated page: connects, says hello, answers pings; reconnects as the page does."""

    def __init__(self, url: str, origin: str, cookie: str, stats: dict, gate: asyncio.Semaphore):
        self.url, self.origin, self.cookie, self.stats, self.gate = url, origin, cookie, stats, gate
        self.worker_id = uuid.uuid4().hex
        self.welcomed = asyncio.get_running_loop().create_future()

    async def run(self) -> None:
        from websockets.asyncio.client import connect

        attempts = 0
        while True:
            opened = False
            try:
                async with self.gate:
                    ws = await connect(
                        self.url,
                        additional_headers={"Cookie": self.cookie},
                        origin=self.origin,
                        open_timeout=120,
                        ping_interval=None,
                        max_queue=4,
                    )
                    hello = {"type": "hello", "id": 1, "workerId": self.worker_id, "capabilities": CAPABILITIES}
                    hello = json.dumps(hello)
                    await ws.send(hello)
                    while json.loads(await ws.recv())["type"] != "welcome":
                        pass
                opened = True
                attempts = 0
                self.stats["connected"] += 1
                self.stats["last_welcome"] = time.time()
                if not self.welcomed.done():
                    self.welcomed.set_result(None)
                else:
                    self.stats["reconnects"] += 1
                async for raw in ws:
                    if isinstance(raw, str) and '"ping"' in raw:
                        message = json.loads(raw)
                        if message["type"] == "ping":
                            await ws.send(json.dumps({"type": "pong", "id": message["id"]}))
                            self.stats["pongs"] += 1
                    elif isinstance(raw, str) and '"hello-again"' in raw:  # another scheduler leads
                        await ws.send(hello)
                        self.stats["hellos_again"] = self.stats.get("hellos_again", 0) + 1
                code = ws.close_code
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # refused, timed out, reset
                code = getattr(getattr(exc, "rcvd", None), "code", None) or type(exc).__name__
                if not opened:
                    self.stats["failures"] += 1
            if opened:
                self.stats["connected"] -= 1
            self.stats["closes"][str(code)] = self.stats["closes"].get(str(code), 0) + 1
            # The worker page's backoff: 0.5 s doubling after each failure, up to 30 s, jitter ±25 %.
            await asyncio.sleep(min(30.0, 0.5 * 2**attempts) * (0.75 + random.random() / 2))
            attempts += 1


async def client_main(conn, urls: list[str], cookie: str, count: int, offset: int) -> None:
    raise_fd_limit()
    stats = {"connected": 0, "pongs": 0, "reconnects": 0, "failures": 0, "last_welcome": 0.0, "closes": {}}
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)
    sims = []
    for i in range(count):
        url = urls[(offset + i) % len(urls)]
        sims.append(Sim(url.replace("http", "ws", 1) + "/ws/worker", url, cookie, stats, gate))
    started = time.perf_counter()
    tasks = [asyncio.create_task(s.run()) for s in sims]
    await asyncio.gather(*(s.welcomed for s in sims))
    conn.send({"connected": count, "seconds": time.perf_counter() - started})
    loop = asyncio.get_running_loop()
    commands: asyncio.Queue = asyncio.Queue()
    loop.add_reader(conn.fileno(), lambda: commands.put_nowait(conn.recv()))
    while (command := await commands.get()) != "stop":
        if command == "stats":
            conn.send({**stats, "rss_mib": rss_mib(os.getpid()), "cpu": time.process_time()})
    for task in tasks:
        task.cancel()
    conn.send("stopped")


def client_process(conn, urls: list[str], cookie: str, count: int, offset: int) -> None:
    asyncio.run(client_main(conn, urls, cookie, count, offset))


class Clients:
    """--clients processes holding `count` simulated workers spread over `urls` (round robin)."""

    def __init__(self, urls: list[str], cookie: str, count: int, processes: int):
        context = multiprocessing.get_context("spawn")
        self.pipes, self.procs = [], []
        share = [count // processes + (i < count % processes) for i in range(processes)]
        offset = 0
        for n in share:
            if not n:
                continue
            parent, child = context.Pipe()
            proc = context.Process(target=client_process, args=(child, urls, cookie, n, offset), daemon=True)
            proc.start()
            self.pipes.append(parent)
            self.procs.append(proc)
            offset += n
        self.count = count

    def wait_connected(self, timeout: float) -> float | None:
        """Seconds until the slowest process had all its workers welcomed; None when some were not
        within `timeout` (what was reached is in stats())."""
        deadline, slowest = time.monotonic() + timeout, 0.0
        for pipe in self.pipes:
            if not pipe.poll(max(0.0, deadline - time.monotonic())):
                return None
            slowest = max(slowest, pipe.recv()["seconds"])
        return slowest

    def stats(self) -> dict:
        for pipe in self.pipes:  # a late "connected" report is not a stats reply
            while pipe.poll(0):
                pipe.recv()
        total: dict = {"connected": 0, "pongs": 0, "reconnects": 0, "failures": 0, "last_welcome": 0.0}
        total.update(closes={}, rss_mib=0.0, cpu=0.0)
        for pipe in self.pipes:
            pipe.send("stats")
        for pipe in self.pipes:
            while "pongs" not in (one := pipe.recv()):
                pass
            for key in ("connected", "pongs", "reconnects", "failures", "rss_mib", "cpu"):
                total[key] += one[key]
            total["last_welcome"] = max(total["last_welcome"], one["last_welcome"])
            for code, n in one["closes"].items():
                total["closes"][code] = total["closes"].get(code, 0) + n
        return total

    def stop(self) -> None:
        for pipe in self.pipes:
            try:
                pipe.send("stop")
            except OSError:
                pass
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()


# ------------------------------------------------------------------ servers


def workers_in_fleet(url: str) -> int:
    """The sum of peermr_workers_connected on GET /metrics (loopback may scrape by default)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return int(sum(float(m) for m in re.findall(r"^peermr_workers_connected\{[^}]*\} (\S+)$", text, re.MULTILINE)))


def leader_status(url: str) -> int:
    try:
        return httpx.get(f"{url}/health/leader", timeout=2).status_code
    except httpx.TransportError:
        return 0


class Cluster:
    def __init__(self, root: Path, database: str, redis_url: str):
        self.root = root
        self.env = {
            "PEERMR_DATABASE_URL": database,
            "PEERMR_REDIS_URL": redis_url,
            "PEERMR_LOG_LEVEL": "warning",
            "PEERMR_JOB_RECOVERY_GRACE_SECONDS": GRACE,
            "PEERMR_JOB_REPLACEMENT_GRACE_SECONDS": GRACE,
        }
        self.processes: list[Appliance] = []

    def start(self, role: str, name: str) -> Appliance:
        process = Appliance(self.root / "data", env={**self.env, "PEERMR_ROLE": role})
        process.log_path = self.root / f"{name}.log"
        self.processes.append(process.start())
        return process

    def stop(self) -> None:
        for process in self.processes:
            process.stop()


def wait_for(predicate, timeout: float, step: float = 0.05) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"not after {timeout} s")
        time.sleep(step)
    return time.monotonic() - started


def signed_in_cookie(url: str) -> str:
    client = Client(url)
    client.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    return cookie_of(client)


# ------------------------------------------------------------------ tasks/s


async def one_run(api: httpx.AsyncClient, job_id: int, tasks: int, tally: Tally, pids: dict[str, int]) -> dict:
    tally.expect(tasks)
    cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
    cpu_self = time.process_time()
    started = time.perf_counter()
    response = await api.post(f"/jobs/{job_id}/runs", json={})
    response.raise_for_status()
    run_id = response.json()["id"]
    await asyncio.wait_for(tally.all_done.wait(), 600)
    run = await ended(api, run_id)
    wall = time.perf_counter() - started
    if run["state"] != "succeeded":
        raise RuntimeError(f"run {run_id} {run['state']}: {run['reason']}")
    return {
        "tasks": tasks,
        "wall": wall,
        "window": tally.last - started,
        "cpu": {name: cpu_seconds(pid) - cpu[name] for name, pid in pids.items()},
        "cpu_self": time.process_time() - cpu_self,
    }


async def measure_tasks(api_url: str, sim_urls: list[str], cookie: str, token: str, pids: dict, plans: list) -> list:
    results = []
    tally = Tally()
    api = httpx.AsyncClient(base_url=api_url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=600)
    for workers, stages, alternate in plans:
        sims = [NoopWorker(sim_urls[i % len(sim_urls)], cookie, tally=tally) for i in range(workers)]
        await asyncio.gather(*(w.start() for w in sims))
        await asyncio.sleep(1 + workers / 16)  # every probe answered and failed
        script = JOB % {"workers": workers, "stages": stages, "alternate": str(alternate).lower(), "noop": NOOP}
        name = f"noop-{workers}-{stages}-{alternate}-{uuid.uuid4().hex[:6]}"
        job = await api.post("/jobs", json={"name": name, "script": script})
        job.raise_for_status()
        warm = (JOB % {"workers": workers, "stages": 2, "alternate": "true", "noop": NOOP}).strip()
        warm_job = (await api.post("/jobs", json={"name": f"warm-{name}", "script": warm})).json()["id"]
        await one_run(api, warm_job, 1 + workers * 2, tally, pids)
        result = await one_run(api, job.json()["id"], 1 + workers * stages, tally, pids)
        results.append({"workers": workers, "stages": stages, "alternate": alternate, **result})
        for w in sims:
            await w.close()
        await asyncio.sleep(0.5)
    await api.aclose()
    return results


def shape(workers: int, stages: int, alternate: bool) -> str:
    return f"{workers} x {stages} {'map/reduce' if alternate else 'map chain'}"


def print_tasks(label: str, results: list[dict], reference: list[dict] | None) -> None:
    for r, ref in zip(results, reference or [None] * len(results), strict=True):
        rate = r["tasks"] / r["wall"]
        cpu = "  ".join(f"{name} {seconds / r['tasks'] * 1e6:.0f}" for name, seconds in r["cpu"].items())
        ratio = f"  {rate / (ref['tasks'] / ref['wall']):.2f} x one process (SQLite)" if ref else ""
        print(
            f"  {label:26} {shape(r['workers'], r['stages'], r['alternate']):18} {r['tasks']:>6} tasks "
            f"{r['wall']:6.2f} s {rate:>6.0f} tasks/s (to the last task-done {r['tasks'] / r['window']:>6.0f})"
            f"{ratio}\n      CPU us/task: {cpu}  sims {r['cpu_self'] / r['tasks'] * 1e6:.0f}"
        )


def tasks_on(api_url: str, sim_urls: list[str], token_of: Appliance, pids: dict, plans: list) -> list:
    cookie = signed_in_cookie(api_url)
    token = token_of.cli("token", "create", ADMIN_EMAIL).stdout.strip().split()[-1]
    return asyncio.run(measure_tasks(api_url, sim_urls, cookie, token, pids, plans))


# ------------------------------------------------------------------ main


def main() -> None:  # noqa: C901  (one bench, its parts in order)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=40000, help="simulated workers over the edges (0: tasks/s only)")
    parser.add_argument("--reference-workers", type=int, default=8192, help="held by one process (0: skip)")
    parser.add_argument("--edges", type=int, default=4)
    parser.add_argument("--clients", type=int, default=8, help="client processes for the simulated workers")
    parser.add_argument("--shapes", default="8x300,64x40", help="ranks x stages, each as a map chain and map/reduce")
    parser.add_argument("--hold", type=float, default=20, help="seconds the fleet is held before measuring memory")
    parser.add_argument("--skip-tasks", action="store_true")
    parser.add_argument("--cluster-only", action="store_true", help="tasks/s of the cluster alone (no one process)")
    parser.add_argument("--connect-timeout", type=float, default=900, help="seconds the fleet may take to connect")
    parser.add_argument("--quick", action="store_true", help="2,000 workers, 1,000 in one process, small shapes")
    args = parser.parse_args()
    if args.quick:
        args.workers, args.reference_workers, args.shapes = 2000, 1000, "8x50,32x10"
    shapes = [tuple(int(n) for n in s.split("x")) for s in args.shapes.split(",")]
    plans = [(w, s, alternate) for w, s in shapes for alternate in (False, True)]
    raise_fd_limit()

    from tests.services import postgres_server, redis_server

    idle = idle_share()
    load = os.getloadavg()
    commit = os.popen("git -C " + str(Path(__file__).resolve().parent.parent) + " rev-parse --short HEAD").read()
    print(f"commit {commit.strip()}, {time.strftime('%Y-%m-%d %H:%M')}; machine idle {idle:.0%}, load {load}")
    foreign: dict[str, float] = {}
    postgres, redis = postgres_server(), redis_server()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        try:
            # 1. Today's one process on SQLite: tasks/s, and the memory of --reference-workers.
            single = Appliance(root / "single", env={"PEERMR_LOG_LEVEL": "warning"}).start()
            try:
                tasks_single = tasks_pg = None
                if not args.skip_tasks and not args.cluster_only:
                    with Foreign() as f:
                        tasks_single = tasks_on(single.url, [single.url], single, {"appliance": single.proc.pid}, plans)
                    foreign["tasks, one process"] = f.cores
                if args.reference_workers:
                    base = rss_mib(single.proc.pid)
                    cookie = signed_in_cookie(single.url)
                    with Foreign() as f:
                        cpu0 = cpu_seconds(single.proc.pid)
                        clients = Clients([single.url], cookie, args.reference_workers, 2)
                        seconds = clients.wait_connected(args.connect_timeout) or float("nan")
                        connect_cpu_single = cpu_seconds(single.proc.pid) - cpu0
                        time.sleep(args.hold)
                        held = rss_mib(single.proc.pid)
                        counted = workers_in_fleet(single.url)
                        client_stats = clients.stats()
                        clients.stop()
                    foreign["memory, one process"] = f.cores
                    ref = {"workers": args.reference_workers, "base": base, "held": held, "seconds": seconds}
                    ref["per"] = (held - base) * 1024 / args.reference_workers
                    print(
                        f"one process: {args.reference_workers} workers connected in {seconds:.1f} s, fleet counts "
                        f"{counted}; CPU {connect_cpu_single * 1000 / args.reference_workers:.2f} ms a connection; "
                        f"RSS {base:.0f} -> {held:.0f} MiB, {ref['per']:.1f} KiB a worker; "
                        f"pongs {client_stats['pongs']}"
                    )
            finally:
                single.stop()

            # 2. One process on PostgreSQL (the cluster's database, no Redis): tasks/s.
            if not args.skip_tasks and not args.cluster_only:
                pg = Appliance(
                    root / "single-pg",
                    env={"PEERMR_LOG_LEVEL": "warning", "PEERMR_DATABASE_URL": postgres.new_database()},
                ).start()
                try:
                    with Foreign() as f:
                        tasks_pg = tasks_on(pg.url, [pg.url], pg, {"appliance": pg.proc.pid}, plans)
                    foreign["tasks, one process on PostgreSQL"] = f.cores
                finally:
                    pg.stop()

            # 3. The cluster: 2 schedulers, N edges.
            cluster = Cluster(root / "cluster", postgres.new_database(), redis.url)
            (root / "cluster").mkdir()
            try:
                first = cluster.start("scheduler", "scheduler-1")
                wait_for(lambda: leader_status(first.url) == 200, 60, 0.1)
                second = cluster.start("scheduler", "scheduler-2")
                edges = [cluster.start("edge", f"edge-{i + 1}") for i in range(args.edges)]
                edge_urls = [edge.url for edge in edges]
                assert leader_status(second.url) == 429
                pids = {"scheduler": first.proc.pid, "redis": redis.proc.pid}
                pids.update({f"edge{i + 1}": edge.proc.pid for i, edge in enumerate(edges)})
                if not args.skip_tasks:
                    with Foreign() as f:
                        tasks_cluster = tasks_on(first.url, edge_urls, first, pids, plans)
                    foreign["tasks, cluster"] = f.cores
                    print("\ntasks/s (CPU per task of each process, µs)")
                    if tasks_single is not None:
                        print_tasks("one process, SQLite", tasks_single, None)
                        print_tasks("one process, PostgreSQL", tasks_pg, tasks_single)
                    print_tasks(f"scheduler + {args.edges} edges", tasks_cluster, tasks_single)
                    slowest = min(r["tasks"] / r["wall"] for r in tasks_cluster)
                    print(
                        f"  target >= 5000 tasks/s through Redis (slowest shape {slowest:.0f}) -> "
                        f"{'met' if slowest >= 5000 else 'NOT met'}"
                    )

                if args.workers:  # 0: tasks/s only
                    # Capacity: the whole fleet over the edges.
                    time.sleep(2)
                    base = {"scheduler": rss_mib(first.proc.pid), "standby": rss_mib(second.proc.pid)}
                    base.update({f"edge{i + 1}": rss_mib(edge.proc.pid) for i, edge in enumerate(edges)})
                    base["redis"] = rss_mib(redis.proc.pid)
                    cookie = signed_in_cookie(edge_urls[0])
                    with Foreign() as f:
                        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
                        started = time.perf_counter()
                        clients = Clients(edge_urls, cookie, args.workers, args.clients)
                        seconds = clients.wait_connected(args.connect_timeout)
                        if seconds is None:
                            print(f"NOT all connected within {args.connect_timeout:.0f} s: {clients.stats()}")
                            seconds = float("nan")
                        connect_cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
                        wall_connect = time.perf_counter() - started
                        counted = workers_in_fleet(first.url)
                        pongs_before = clients.stats()["pongs"]
                        cpu1 = {name: cpu_seconds(pid) for name, pid in pids.items()}
                        held_started = time.perf_counter()
                        time.sleep(args.hold)
                        idle_cpu = {
                            name: (cpu_seconds(pid) - cpu1[name]) / (time.perf_counter() - held_started)
                            for name, pid in pids.items()
                        }
                    foreign["capacity"] = f.cores
                    held = {"scheduler": rss_mib(first.proc.pid), "standby": rss_mib(second.proc.pid)}
                    held.update({f"edge{i + 1}": rss_mib(edge.proc.pid) for i, edge in enumerate(edges)})
                    held["redis"] = rss_mib(redis.proc.pid)
                    counted_after = workers_in_fleet(first.url)
                    stats = clients.stats()
                    per_edge = args.workers / args.edges
                    print(
                        f"\nworkers: {args.workers} over {args.edges} edges ({per_edge:.0f} each) from "
                        f"{len(clients.procs)} client processes, all welcomed in {seconds:.1f} s "
                        f"({args.workers / wall_connect:.0f}/s); "
                        f"the scheduler's fleet counts {counted}, {counted_after} after {args.hold:.0f} s held; "
                        f"pongs sent while held {stats['pongs'] - pongs_before}; reconnects {stats['reconnects']}, "
                        f"failed connects {stats['failures']}"
                    )
                    print(
                        "  connecting, CPU ms a connection: "
                        + ", ".join(f"{n} {s * 1000 / args.workers:.2f}" for n, s in connect_cpu.items())
                    )
                    print("  held idle, cores: " + ", ".join(f"{n} {s:.2f}" for n, s in idle_cpu.items()))
                    print(f"  client processes: RSS {stats['rss_mib']:.0f} MiB in all")
                    print("  RSS, MiB (idle -> with the fleet; KiB per worker it holds):")
                    for name in held:
                        share = per_edge if name.startswith("edge") else args.workers
                        print(
                            f"    {name:10} {base[name]:7.0f} -> {held[name]:7.0f}"
                            f"  {(held[name] - base[name]) * 1024 / share:6.1f} KiB"
                        )
                    edge_growth = sum(held[n] - base[n] for n in held if n.startswith("edge"))
                    edge_per = edge_growth * 1024 / args.workers
                    whole = sum(held[n] - base[n] for n in held if n != "standby")
                    print(
                        f"  edges together {edge_per:.1f} KiB a worker; edges + scheduler + Redis "
                        f"{whole * 1024 / args.workers:.1f} KiB a worker"
                    )
                    if args.reference_workers:
                        print(f"  one process (same run, {ref['workers']} workers): {ref['per']:.1f} KiB a worker")
                        print(f"  edge per worker / one process per worker: {edge_per / ref['per']:.2f}")
                    met = args.workers >= 40000 and counted_after >= args.workers and edge_per <= 100
                    print(
                        f"  target: {args.edges} edges hold >= 40000 workers at <= 100 KiB each -> "
                        f"{'met' if met else 'NOT met'} ({counted_after} held, "
                        f"{edge_per:.1f} KiB a worker on the edges)"
                    )

                    # Failover: SIGKILL the leader with the whole fleet connected.
                    before = clients.stats()
                    survivors = {"new leader": second.proc.pid, "redis": redis.proc.pid}
                    survivors.update({f"edge{i + 1}": edge.proc.pid for i, edge in enumerate(edges)})
                    cpu_kill = {name: cpu_seconds(pid) for name, pid in survivors.items()}
                    killed = time.monotonic()
                    first.kill()
                    took_leader = wait_for(lambda: leader_status(second.url) == 200, 120, 0.05)

                    def all_back() -> bool:
                        try:
                            return workers_in_fleet(second.url) >= args.workers
                        except httpx.HTTPError:
                            return False

                    with Foreign() as f:
                        try:
                            wait_for(all_back, args.connect_timeout, 0.2)
                        except TimeoutError:
                            print(f"NOT all back within {args.connect_timeout:.0f} s: {workers_in_fleet(second.url)}")
                        took_fleet = time.monotonic() - killed
                        failover_cpu = {name: cpu_seconds(pid) - cpu_kill[name] for name, pid in survivors.items()}
                        after = clients.stats()
                    foreign["failover"] = f.cores
                    print(
                        f"\nfailover with {args.workers} workers: standby leads (/health/leader 200) "
                        f"{took_leader:.2f} s after the SIGKILL; "
                        f"its fleet counts every worker after {took_fleet:.2f} s; "
                        f"reconnects {after['reconnects'] - before['reconnects']}, closes {after['closes']}, "
                        f"the last welcome {after['last_welcome'] - (time.time() - (time.monotonic() - killed)):.2f} s "
                        f"after the kill"
                    )
                    print(
                        "  CPU ms a worker from the SIGKILL until every worker was back: "
                        + ", ".join(f"{n} {s * 1000 / args.workers:.3f}" for n, s in failover_cpu.items())
                        + f", client processes {(after['cpu'] - before['cpu']) * 1000 / args.workers:.3f}"
                    )
                    print(
                        f"  target < 10 s -> leader {'met' if took_leader < 10 else 'NOT met'}, "
                        f"fleet back {'met' if took_fleet < 10 else 'NOT met'}"
                    )
                    clients.stop()
                    for process in cluster.processes:
                        for line in process.log().splitlines():
                            if "stopped renewing" in line or "lost leadership" in line:
                                print(f"  {process.log_path.stem}: {line}")
            finally:
                cluster.stop()
        finally:
            postgres.stop()
            redis.stop()
    print(f"\nother load (cores used by processes outside this bench): {foreign}")
    print(f"load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    main()
