"""Schedulers and edges (`peermr serve --role scheduler|edge`) on one PostgreSQL and one Redis, for the
tests past one machine; optionally HAProxy in front of the edges, as one address for browsers."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.support import Appliance


class Cluster:
    """Processes on one data directory (secrets, blobs), one database and one Redis."""

    def __init__(self, root: Path, database: str, redis_url: str, **settings: str):
        self.root = root
        self.env = {"PEERMR_DATABASE_URL": database, "PEERMR_REDIS_URL": redis_url, **settings}
        self.processes: list[Appliance] = []

    def process(self, role: str, name: str) -> Appliance:
        """A process of ``role``, not started yet (its port is chosen)."""
        process = Appliance(self.root / "data", env={**self.env, "PEERMR_ROLE": role})
        process.log_path = self.root / f"{name}.log"
        self.processes.append(process)
        return process

    def start(self, role: str, name: str) -> Appliance:
        return self.process(role, name).start()

    def stop(self) -> None:
        for process in self.processes:
            process.stop()

    def leader(self) -> Appliance:
        """The scheduler that leads (one is started when none runs)."""
        for process in self.schedulers():
            if leader_status(process) == 200:
                return process
        leader = self.start("scheduler", f"scheduler-{len(self.processes) + 1}")
        wait_for_leader(leader)
        return leader

    def schedulers(self) -> list[Appliance]:
        return [p for p in self.processes if p.env["PEERMR_ROLE"] == "scheduler" and p.proc and p.proc.poll() is None]


def leader_status(process: Appliance) -> int:
    return httpx.get(f"{process.url}/health/leader", timeout=5).status_code


def wait_for_leader(process: Appliance, timeout: float = 30) -> float:
    """Seconds until ``process`` leads."""
    started = time.monotonic()
    while leader_status(process) != 200:
        assert time.monotonic() - started < timeout, f"no leader after {timeout} s:\n{process.log()}"
        time.sleep(0.1)
    return time.monotonic() - started


def haproxy_config(port: int, edges: list[Appliance]) -> str:
    """One address in front of the edges: a connection to an edge that died goes to another."""
    servers = "\n".join(
        f"    server edge{i} 127.0.0.1:{edge.port} check inter 500ms fall 2 rise 1" for i, edge in enumerate(edges)
    )
    return f"""global
    maxconn 4096
defaults
    mode http
    timeout connect 2s
    timeout client 1h
    timeout server 1h
    timeout tunnel 1h
    retries 3
    option redispatch
frontend front
    bind 127.0.0.1:{port}
    default_backend edges
backend edges
    balance roundrobin
    option httpchk GET /health/ready
{servers}
"""
