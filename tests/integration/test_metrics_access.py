"""GET /metrics is for operators: served to the admin's allow-list (loopback by default) or with the
metrics token, refused otherwise with what would let the caller in; and it shows what an operator
graphs (workers, queue, runs, tasks and their failures, PMRFS) after real runs on simulated workers."""

from __future__ import annotations

import asyncio
import html
import json
import re
from pathlib import Path

import httpx
import pytest

from appliance.web.formatting import human_bytes
from tests.integration.test_job_scheduling import Api, job_script, token_for
from tests.sim_workers import CAPABILITIES, SimWorker, cookie_of, linked_maps, start_workers
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD

# Linux answers on all of 127.0.0.0/8: a client bound to 127.0.0.2 is another source address.
OTHER_SOURCE = "127.0.0.2"


def scrape(appliance, token: str | None = None, source: str = "127.0.0.1") -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=source)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(transport=transport, timeout=30) as client:
        return client.get(f"{appliance.url}/metrics", headers=headers)


def value(text: str, name: str, **labels: str) -> float:
    """The sample's value, or 0 when the exposition has no such sample."""
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(wanted) + r"\}" if labels else "") + r" (\S+)"
    found = re.search("^" + pattern + "$", text, re.M)
    return float(found.group(1)) if found else 0.0


def metrics_token(admin) -> str:
    page = admin.form("/ui/admin/settings/metrics/token", {})
    assert page.status_code == 200
    return re.search(r'id="metrics-token">([^<]+)<', page.text).group(1)


def test_loopback_may_scrape_by_default(appliance):
    assert scrape(appliance).status_code == 200
    # 127.0.0.2 is loopback too, so the default allows it; the next test narrows the list.
    assert scrape(appliance, source=OTHER_SOURCE).status_code == 200


def test_allow_list_and_token(appliance, admin):
    saved = admin.form("/ui/admin/settings/metrics", {"sources": "127.0.0.1/32"})
    assert saved.status_code == 303
    refused = scrape(appliance, source=OTHER_SOURCE)
    assert refused.status_code == 403
    assert f"not to {OTHER_SOURCE}" in refused.text and "metrics token" in refused.text
    assert scrape(appliance).status_code == 200

    token = metrics_token(admin)
    assert token.startswith("pmm_")
    served = scrape(appliance, token=token, source=OTHER_SOURCE)
    assert served.status_code == 200 and "peermr_build_info" in served.text
    wrong = scrape(appliance, token=token + "x", source=OTHER_SOURCE)
    assert wrong.status_code == 401 and "not the appliance's metrics token" in wrong.text
    # A wrong token is refused even from an allowed address: a caller that sends one means to use it.
    assert scrape(appliance, token="pmm_nope").status_code == 401
    # An admin's API token is not a metrics token.
    assert scrape(appliance, token=token_for(appliance, "admin@example.com"), source=OTHER_SOURCE).status_code == 401

    # A new token replaces the old one.
    newer = metrics_token(admin)
    assert scrape(appliance, token=token, source=OTHER_SOURCE).status_code == 401
    assert scrape(appliance, token=newer, source=OTHER_SOURCE).status_code == 200

    # An empty list allows no address: even loopback then needs the token.
    assert admin.form("/ui/admin/settings/metrics", {"sources": ""}).status_code == 303
    assert scrape(appliance).status_code == 403
    assert scrape(appliance, token=newer).status_code == 200

    # A malformed list is refused with its reason and changes nothing.
    bad = admin.form("/ui/admin/settings/metrics", {"sources": "10.0.0.0/8, not-a-network"})
    assert bad.status_code == 400 and "'not-a-network' is not an IP address or CIDR" in html.unescape(bad.text)
    assert scrape(appliance).status_code == 403
    assert admin.form("/ui/admin/settings/metrics", {"sources": "127.0.0.0/8, ::1"}).status_code == 303
    assert scrape(appliance).status_code == 200


@pytest.fixture(scope="module")
def carol(appliance):
    appliance.add_user("carol@example.com", "coordinator", "carol-password-1")
    client = appliance.client()
    client.login("carol@example.com", "carol-password-1")
    yield client, Api(appliance, token_for(appliance, "carol@example.com"))
    client.close()


async def test_what_an_operator_graphs(appliance, carol):
    client, api = carol
    before = scrape(appliance).text
    gpu = {**CAPABILITIES, "gpu": {"info": {"vendor": "test"}, "features": [], "limits": {}}}
    workers = await start_workers(appliance.url, cookie_of(client), 2)
    workers.append(await SimWorker(appliance.url, cookie_of(client), capabilities=gpu).start())
    try:
        text = scrape(appliance).text
        # Labelled by account id: an employee's email never reaches the monitoring system.
        [(carol_id,)] = appliance.query("SELECT id FROM accounts_user WHERE email = 'carol@example.com'")
        assert value(text, "peermr_workers_connected", account=str(carol_id), gpu="no", state="idle") == 2
        assert value(text, "peermr_workers_connected", account=str(carol_id), gpu="yes", state="idle") == 1
        assert "@" not in text
        # Simulated workers do not say their capacity: one task each.
        assert value(text, "peermr_worker_capacity") == 3

        # A run that waits: the queue's depth, then it runs on 3 workers (1 input, 3 map, 3 reduce tasks).
        waiting = api.run(api.job(job_script(workers=4)))
        text = scrape(appliance).text
        assert value(text, "peermr_queue_depth") == 1
        assert value(text, "peermr_runs", state="queued") == 1
        api.http.post(f"/runs/{waiting['id']}/cancel", json={})
        done = await api.wait(api.run(api.job(job_script(workers=3)))["id"])
        assert done["state"] == "succeeded"
        text = scrape(appliance).text
        assert value(text, "peermr_tasks_done_total") - value(before, "peermr_tasks_done_total") == 7
        assert value(text, "peermr_runs", state="succeeded") == 1
        assert value(text, "peermr_runs", state="cancelled") == 1
        assert value(text, "peermr_queue_depth") == 0
        assert value(text, "peermr_run_queue_wait_seconds_count") >= 1
    finally:
        for w in workers:
            await w.close()

    async def throw(worker: SimWorker, task: dict) -> None:
        await worker.send({"type": "task-failed", "taskId": task["taskId"], "error": "Error: boom"})

    failing = await SimWorker(appliance.url, cookie_of(client), on_task=throw).start()
    try:
        failed = await api.wait(api.run(api.job(job_script(workers=1)))["id"])
        assert failed["state"] == "failed"
    finally:
        await failing.close()
    text = scrape(appliance).text
    assert (
        value(text, "peermr_task_failures_total", cause="job_error")
        - value(before, "peermr_task_failures_total", cause="job_error")
        == 1
    )
    for name in (
        'peermr_peer_bytes_total{kind="blob"}',
        "peermr_turn_allocations",
        "peermr_pmrfs_blobs",
        "peermr_pmrfs_bytes",
    ):
        assert re.search(f"^{re.escape(name)} ", text, re.M), f"{name} is missing"

    # Two ranks linked directly (peer messages, collectives): the bytes both pages report, counted as billing
    # counts them (the smaller report), while the run goes on.
    assert await link_bytes(appliance, client, api, reports=(70_000, 65_536)) == 65_536


def link_counter(appliance) -> float:
    return value(scrape(appliance).text, "peermr_peer_bytes_total", kind="link")


async def link_bytes(appliance, client, api: Api, reports: tuple[int, int]) -> float:
    """Run a job on two workers whose map tasks link rank 0 to rank 1 and report ``reports`` bytes through
    it (rank 0's, rank 1's); how much the link counter grew while the tasks still ran."""
    reported, release = asyncio.Event(), asyncio.Event()

    async def report(link: dict, workers: dict[int, SimWorker]) -> None:
        for rank, size in enumerate(reports):
            await workers[rank].send({"type": "transfer-bytes", "transferId": link["linkId"], "bytes": size})
        reported.set()

    before = link_counter(appliance)
    workers = await start_workers(appliance.url, cookie_of(client), 2, on_task=linked_maps(report, release))
    try:
        run = api.run(api.job(job_script(workers=2)))
        await asyncio.wait_for(reported.wait(), 30)
        for _ in range(100):  # each worker's messages are read in turn: the second report may take a moment
            if (grown := link_counter(appliance) - before) > 0:
                break
            await asyncio.sleep(0.1)
        release.set()
        assert (await api.wait(run["id"]))["state"] == "succeeded"
        return grown
    finally:
        for w in workers:
            await w.close()


def test_the_grafana_dashboard_graphs_metrics_the_appliance_exposes(appliance):
    dashboard = json.loads((Path(__file__).parents[2] / "docs" / "grafana-dashboard.json").read_text())
    names = {n for p in dashboard["panels"] for t in p["targets"] for n in re.findall(r"peermr_\w+", t["expr"])}
    exposed = scrape(appliance).text
    # A histogram's series (_bucket) are named after it; the exposition names every metric in its HELP line.
    missing = sorted(n for n in names if re.sub(r"_bucket$", "", n) not in exposed)
    assert not missing, f"the dashboard graphs metrics /metrics does not have: {missing}"
    assert len(names) >= 15


async def test_the_overview_and_a_scrape_count_the_same_peer_bytes_in_the_same_unit(appliance_with):
    """One counter of bytes between browsers: the Overview's card shows what /metrics counts, in the
    binary units every page uses (it once said 14.1 MiB where a scrape said 14.9 MB and Billing 29.8 MB)."""
    server = await asyncio.to_thread(appliance_with, metrics_sample_seconds=1)
    server.add_user("pat@example.com", "coordinator", "pat-password-1")
    client, admin = server.client(), server.client()
    client.login("pat@example.com", "pat-password-1")
    admin.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    api = Api(server, token_for(server, "pat@example.com"))
    await link_bytes(server, client, api, reports=(3_000_000, 3_000_000))
    text = scrape(server).text
    moved = value(text, "peermr_peer_bytes_total", kind="blob") + value(text, "peermr_peer_bytes_total", kind="link")
    assert moved == 3_000_000
    card = f"({human_bytes(int(moved))} peer to peer;"  # "(2.9 MiB peer to peer; ..."
    for _ in range(100):
        if card in html.unescape(admin.get("/ui/overview/live").text):
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError(f"the Overview never showed {card}")
