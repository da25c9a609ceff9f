"""The appliance killed (SIGKILL) in the middle of a word count on four Chromium workers, and started
again on the same data dir: the worker pages reconnect by themselves, say which blobs their
IndexedDB still holds and which tasks they ran on meanwhile, and the same run finishes with the
right answer, keeping the tasks that had finished and those the pages carried on (the rules are
covered with simulated workers in tests/integration/test_restart_recovery.py).
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.e2e.test_jobs_in_browsers import CorpusServer
from tests.e2e.test_stragglers_in_browsers import PARTS, job_script, log_lines, log_text, make_corpus, output, start
from tests.e2e.test_stragglers_in_browsers import wait as wait_for_end
from tests.support import Appliance

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def texts():
    return make_corpus(seed=5, lines=600)


@pytest.fixture(scope="module")
def data_server(texts):
    server = CorpusServer({f"/part-{i}.txt": t.encode() for i, t in enumerate(texts)})
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def appliance(tmp_path_factory, data_server):
    env = {"PEERMR_FETCH_ORIGINS": data_server.origin, "PEERMR_JOB_RECOVERY_GRACE_SECONDS": "60"}
    server = Appliance(tmp_path_factory.mktemp("restart") / "data", env=env).start()
    yield server
    server.stop()


def every_rank_logged(api, run_id: int, what: str, timeout: float = 120) -> None:
    """Wait until all four ranks' tabs logged ``what`` (logs are stored every second)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len({line["source"] for line in log_lines(api, run_id) if line["text"] == what}) >= PARTS:
            return
        time.sleep(0.2)
    raise AssertionError(f"not every rank logged {what!r}: {log_text(api, run_id)}")


@pytest.mark.parametrize("stage", ["map", "reduce"])
def test_the_appliance_killed_mid_stage_comes_back_and_the_run_gives_the_right_answer(
    appliance, api, workers, data_server, texts, stage
):
    urls = [f"{data_server.origin}/part-{i}.txt" for i in range(PARTS)]
    # Each task of the stage takes 6 s (reporting progress meanwhile): the kill lands inside it.
    waits = {"map_ms": 6000} if stage == "map" else {"reduce_ms": 6000}
    run_id = start(api, f"restart-{stage}", job_script(urls, rounds=50, **waits))
    every_rank_logged(api, run_id, f"{stage} running")
    time.sleep(1.5)  # a checkpoint is written within a second of a change
    appliance.kill()
    appliance.start()
    done = wait_for_end(api, run_id, timeout=240)
    assert done["state"] == "succeeded", (done["reason"], log_text(api, run_id)[-3000:])
    text = log_text(api, run_id)
    assert output(api, run_id) == dict(Counter(w for t in texts for w in t.split())), text
    kept = 1 if stage == "map" else 1 + PARTS  # the input function, and the maps before the reduce
    assert f"the appliance restarted: the run continues with {kept} finished task(s) kept" in text, text
    assert f"recovered after the restart: {PARTS} worker(s) back" in text, text
    # The tasks cut short by the kill ran again; the finished ones did not.
    rows = appliance.query(f"SELECT stage, state, error FROM jobs_task WHERE run = {run_id} AND stage >= 0")
    index = 0 if stage == "map" else 1
    # The pages ran on through the kill and reported their tasks once back. Only a report already
    # sent as the appliance died is lost with the connection: its page no longer has the task, which
    # runs again.
    assert "goes on there" in text, text
    ended = [(state, error) for st, state, error in rows if st == index and state != "superseded"]  # backups race
    assert [state for state, _ in ended].count("done") == PARTS, (rows, text)
    assert all(error == "its page no longer had it" for state, error in ended if state != "done"), (rows, text)
    if stage == "reduce":
        assert sorted(s for st, s, _ in rows if st == 0) == ["done"] * PARTS
