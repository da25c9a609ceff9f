"""Past one machine, in real browsers: four worker tabs reach two edges through HAProxy, two schedulers
share PostgreSQL and Redis. The active scheduler is SIGKILLed in the map, then (a new standby started,
as systemd would) in the reduce; an edge is SIGKILLed mid-run. Each time the word count gives the
right answer: the standby adopts the run from its checkpoint, the edges close the pages' sockets so
they say hello to it, and HAProxy sends the pages of a dead edge to the other.
"""

from __future__ import annotations

import re
import time
from collections import Counter

import pytest

from tests.cluster import Cluster, haproxy_config, wait_for_leader
from tests.e2e.test_restart_in_browsers import data_server as data_server  # the corpus and its server: fixtures
from tests.e2e.test_restart_in_browsers import every_rank_logged
from tests.e2e.test_restart_in_browsers import texts as texts
from tests.e2e.test_stragglers_in_browsers import PARTS, job_script, log_text, output, start
from tests.e2e.test_stragglers_in_browsers import wait as wait_for_end
from tests.support import free_port

pytestmark = pytest.mark.e2e


class Front:
    """The address browsers and the API use (HAProxy), with the commands of the shared data dir."""

    def __init__(self, url: str, cluster: Cluster):
        self.url = url
        self.cluster = cluster
        self.edge = next(p for p in cluster.processes if p.env["PEERMR_ROLE"] == "edge")

    def cli(self, *args: str, input: str | None = None):
        return self.edge.cli(*args, input=input)

    def query(self, sql: str) -> list[tuple]:
        return self.edge.query(sql)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, postgres_service, redis_service, data_server):
    cluster = Cluster(
        tmp_path_factory.mktemp("cluster"),
        postgres_service.new_database(),
        redis_service.url,
        PEERMR_FETCH_ORIGINS=data_server.origin,
    )
    wait_for_leader(cluster.start("scheduler", "scheduler-1"))
    cluster.start("scheduler", "scheduler-2")
    cluster.start("edge", "edge-1")
    cluster.start("edge", "edge-2")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def appliance(cluster, haproxy_service):
    port = free_port()
    edges = [p for p in cluster.processes if p.env["PEERMR_ROLE"] == "edge"]
    haproxy_service(haproxy_config(port, edges))
    return Front(f"http://127.0.0.1:{port}", cluster)


def right_answer(api, run_id: int, texts: list[str]) -> str:
    done = wait_for_end(api, run_id, timeout=240)
    assert done["state"] == "succeeded", (done["reason"], log_text(api, run_id)[-3000:])
    text = log_text(api, run_id)
    assert output(api, run_id) == dict(Counter(w for t in texts for w in t.split())), text
    return text


@pytest.mark.parametrize("stage", ["map", "reduce"])
def test_the_active_scheduler_killed_mid_stage_a_standby_finishes_the_run(
    cluster, appliance, api, workers, data_server, texts, stage
):
    urls = [f"{data_server.origin}/part-{i}.txt" for i in range(PARTS)]
    waits = {"map_ms": 6000} if stage == "map" else {"reduce_ms": 6000}
    run_id = start(api, f"failover-{stage}", job_script(urls, rounds=50, **waits))
    every_rank_logged(api, run_id, f"{stage} running")
    time.sleep(1.5)  # a checkpoint is written within a second of a change
    leader = cluster.leader()
    standby = next(p for p in cluster.schedulers() if p is not leader)
    leader.kill()
    took = wait_for_leader(standby)
    cluster.start("scheduler", f"scheduler-{len(cluster.processes) + 1}")  # the next standby, as systemd would
    text = right_answer(api, run_id, texts)
    assert took < 10, f"the standby took {took:.1f} s to lead"
    assert f"recovered after the restart: {PARTS} worker(s) back" in text, text


def test_an_edge_killed_mid_run_its_pages_go_on_through_the_other(cluster, appliance, api, workers, data_server, texts):
    urls = [f"{data_server.origin}/part-{i}.txt" for i in range(PARTS)]
    run_id = start(api, "edge-killed", job_script(urls, rounds=50, map_ms=6000))
    every_rank_logged(api, run_id, "map running")
    edge = next(p for p in cluster.processes if p.env["PEERMR_ROLE"] == "edge")
    edge.kill()
    right_answer(api, run_id, texts)
    # Its pages came back through the other edge, as the same pages: their dead sockets were replaced
    # (or left with the edge's lapsed key).
    assert re.search(r"connected again: its earlier connection is dropped|stopped renewing", cluster.leader().log())
    for page in workers.tabs:
        assert page.locator("#connection").inner_text(timeout=30_000) == "connected"
