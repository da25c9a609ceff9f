"""`peermr job ...` against a real appliance with simulated workers: the submit-time warning, Ctrl-C
cancelling (or, with --detach, leaving) the run it waits for, and list / status / cancel / logs."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.integration.test_job_scheduling import Api, job_script
from tests.sim_workers import cookie_of, start_workers


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "noop.js"
    path.write_text(job_script(workers=2))
    return path


def job(appliance, carol_token, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PEERMR_SERVER": appliance.url, "PEERMR_TOKEN": carol_token}
    return subprocess.run(
        [sys.executable, "-m", "appliance", "job", *args], capture_output=True, text=True, env=env, timeout=60
    )


@pytest.fixture(autouse=True)
def ctrl_c_reaches_the_cli():
    """The CLI gets SIGINT as a terminal's Ctrl-C would give it, also where this suite itself runs
    with SIGINT ignored (a background job of a non-interactive shell, nohup): a child inherits an
    ignored signal, and Python then installs no KeyboardInterrupt handler. A handler here is reset to
    the default in the child at exec."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def waiting_cli(appliance, carol_token, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PEERMR_SERVER": appliance.url, "PEERMR_TOKEN": carol_token}
    return subprocess.Popen(
        [sys.executable, "-m", "appliance", "job", "run", *args, "--wait"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def interrupt_once_queued(cli: subprocess.Popen, carol: Api) -> tuple[int, str]:
    """Ctrl-C the waiting CLI once its run is queued; its exit status and what it printed."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not [r for r in carol.http.get("/runs").json() if r["state"] == "queued"]:
        time.sleep(0.2)
    time.sleep(1)  # the CLI is polling by now
    cli.send_signal(signal.SIGINT)
    _, stderr = cli.communicate(timeout=30)
    return cli.returncode, stderr


def test_ctrl_c_cancels_the_run_it_waits_for_after_warning_of_too_few_workers(appliance, carol_token, carol, script):
    cli = waiting_cli(appliance, carol_token, str(script))
    status, stderr = interrupt_once_queued(cli, carol)
    assert status == 130
    assert "warning: run" in stderr and "asks 2, 0 connected, 0 eligible: it waits until enough are connected" in stderr
    # Before it was queued, the command said what the run would find.
    assert "workers: No worker is connected right now: the run asks 2 and waits in the queue" in stderr
    run_id = int(re.search(r"^run (\d+): ", stderr, re.M).group(1))
    assert f"run {run_id} cancelled (Ctrl-C; --detach leaves a run running)" in stderr
    assert carol.get(run_id)["state"] == "cancelled"


def test_with_detach_ctrl_c_leaves_the_run_queued(appliance, carol_token, carol, script):
    cli = waiting_cli(appliance, carol_token, str(script), "--detach")
    status, stderr = interrupt_once_queued(cli, carol)
    assert status == 130
    run_id = int(re.search(r"^run (\d+): ", stderr, re.M).group(1))
    assert f"left run {run_id} running: peermr job status {run_id}, peermr job cancel {run_id}" in stderr
    assert carol.get(run_id)["state"] == "queued"

    status = job(appliance, carol_token, "status", str(run_id))
    assert status.returncode == 0 and status.stdout.startswith(f"run {run_id} (noop): queued (#1): asks 2")
    listed = job(appliance, carol_token, "list")
    assert listed.returncode == 0
    assert [line.split()[:3] for line in listed.stdout.splitlines()[1:3]] == [
        [str(run_id), "queued", "noop"],
        [str(run_id - 1), "cancelled", "noop"],
    ]
    cancelled = job(appliance, carol_token, "cancel", str(run_id))
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == f"run {run_id} cancelled"
    again = job(appliance, carol_token, "cancel", str(run_id))
    assert again.returncode == 1 and again.stderr.startswith("peermr: ")
    missing = job(appliance, carol_token, "status", "999999")
    assert (missing.returncode, missing.stderr) == (1, "peermr: no run 999999\n")


async def test_logs_follow_prints_each_line_once_until_the_run_ends(appliance, carol_token, carol, carol_client):
    workers = await start_workers(appliance.url, cookie_of(carol_client), 2)
    try:
        run = carol.run(carol.job(job_script(workers=2), name="logged"))
        follow = await asyncio.to_thread(job, appliance, carol_token, "logs", str(run["id"]), "--follow")
        assert follow.returncode == 0, follow.stderr
        assert carol.get(run["id"])["state"] == "succeeded"
        lines = follow.stdout.splitlines()
        assert "coordinator: queued: needs 2 worker(s)" in lines[0]
        assert lines[-1].endswith("coordinator: succeeded")
        assert len(lines) == len(set(lines))  # nothing printed twice while polling
        plain = await asyncio.to_thread(job, appliance, carol_token, "logs", str(run["id"]))
        assert plain.stdout.splitlines() == lines
    finally:
        for w in workers:
            await w.close()


def test_the_api_and_the_run_dialog_warn_of_too_few_workers(appliance, carol, carol_client):
    job_id = carol.job(job_script(workers=3), name="big")
    run = carol.run(job_id)
    assert run["warning"] == "asks 3, 0 connected, 0 eligible"
    carol.http.post(f"/runs/{run['id']}/cancel")
    dialog = carol_client.get(f"/ui/jobs/{job_id}/run").text
    assert "No worker is connected right now: a run waits in the queue until enough are." in dialog
    started = carol_client.form(f"/ui/jobs/{job_id}/runs", {"worker_count": "3", "group_count": "1"})
    assert started.status_code == 303
    page = carol_client.get(started.headers["location"]).text
    assert "flash-warning" in page and "but it asks 3, 0 connected, 0 eligible" in page


async def connected_now(carol, count: int) -> None:
    """Wait until exactly ``count`` workers are connected (those of a test before may still be leaving)."""
    job_id = carol.job(job_script(workers=1), name="probe")
    for _ in range(100):
        if carol.http.post(f"/jobs/{job_id}/capacity", json={}).json()["connected"] == count:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"not {count} workers connected")


async def test_a_run_asking_more_workers_than_are_connected_is_offered_those_connected(
    appliance, carol, carol_token, carol_client, script
):
    await connected_now(carol, 0)
    workers = await start_workers(appliance.url, cookie_of(carol_client), 1)
    try:
        await connected_now(carol, 1)
        # The script asks 2, one is connected: the run waits, and the command says how to use the one.
        queued = await asyncio.to_thread(job, appliance, carol_token, "run", str(script))
        assert queued.returncode == 0, queued.stderr
        offer = "hint: --workers connected (or --workers 1) would use the 1 connected worker(s) per group instead"
        assert offer in queued.stderr
        assert (await asyncio.to_thread(job, appliance, carol_token, "cancel", queued.stdout.strip())).returncode == 0
        command = ["run", str(script), "--workers", "connected", "--wait"]
        ran = await asyncio.to_thread(job, appliance, carol_token, *command)
        assert ran.returncode == 0, ran.stderr
        assert "using the 1 connected worker(s) per group" in ran.stderr and "succeeded" in ran.stderr
    finally:
        for w in workers:
            await w.close()
    # None connected yet, as right after `peermr worker &`: it waits for the workers to join, then uses them.
    await connected_now(carol, 0)
    cli = waiting_cli(appliance, carol_token, str(script), "--workers", "connected")
    # The worker joins once the command says it waits (a loaded machine takes seconds to start Python).
    said = ""
    while not said.endswith("waiting for workers to join...\n"):
        line = await asyncio.wait_for(asyncio.to_thread(cli.stderr.readline), 60)
        assert line, said  # it ended without saying it waits
        said += line
    joined = await start_workers(appliance.url, cookie_of(carol_client), 1)
    try:
        _, rest = await asyncio.to_thread(cli.communicate, timeout=60)
        assert cli.returncode == 0, said + rest
        assert "using the 1 connected worker(s) per group" in rest
    finally:
        for w in joined:
            await w.close()


async def test_every_runs_log_reads_in_time_order(appliance, carol, carol_client):
    """Runs that end while the log's background flush is writing: each log still reads queued, started,
    succeeded in that order (2 runs in 19 once read "succeeded" above "queued")."""
    workers = await start_workers(appliance.url, cookie_of(carol_client), 6)  # runs end side by side
    try:
        job_id = carol.job(job_script(workers=1), name="in order")
        runs = [carol.run(job_id)["id"] for _ in range(19)]
        for run_id in runs:
            assert (await carol.wait(run_id, timeout=60))["state"] == "succeeded"
        for run_id in runs:
            lines = [json.loads(line)["text"] for line in carol.http.get(f"/runs/{run_id}/logs").text.splitlines()]
            events = [text.split(":")[0].split(" on ")[0] for text in lines]
            kept = [e for e in events if e in ("queued", "started", "succeeded")]
            assert kept == ["queued", "started", "succeeded"], (run_id, lines)
    finally:
        for w in workers:
            await w.close()
