"""Result validation (execution.validation = {replicas: 2}): each task runs on two workers, a
mismatch starts a third attempt that decides, the dissenter's output is rejected and its score
drops; attempts that never agree fail the run (simulated workers, one of which lies).
"""

from __future__ import annotations

from tests.integration.test_job_scheduling import job_script
from tests.sim_workers import SimWorker, cookie_of, finish_empty, start_workers

VALIDATED = {"validation": "{replicas: 2}"}


def wrong_maps(blob: str):
    """A worker whose map tasks report an output nobody else gives (other tasks finish as they should)."""

    async def handler(worker: SimWorker, task: dict) -> None:
        if task["kind"] != "map":
            await finish_empty(worker, task)
            return
        output = {"partition": 0, "sha256": blob * 64, "size": 3, "records": 1}
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": [output], "emits": 1, "cpuMs": 1})

    return handler


def rows(appliance, run_id: int, stage: int) -> list[tuple]:
    return appliance.query(
        f"SELECT worker_id, state, error FROM jobs_task WHERE run = {run_id} AND stage = {stage} ORDER BY attempt"
    )


async def test_a_wrong_output_loses_to_the_third_attempt_and_costs_its_worker(appliance, carol_client, carol):
    cookie = cookie_of(carol_client)
    # The liar connects first: with equal scores it gets rank 0.
    liar = await SimWorker(appliance.url, cookie, worker_id="liar-0001", on_task=wrong_maps("a")).start()
    honest = await start_workers(appliance.url, cookie, 2)
    try:
        run = carol.run(carol.job(job_script(workers=1, **VALIDATED)))
        done = await carol.wait(run["id"], timeout=30)
        assert done["state"] == "succeeded", done
        maps = rows(appliance, run["id"], 0)
        assert [(w, s) for w, s, _ in maps if w == "liar-0001"] == [("liar-0001", "rejected")]
        assert sorted(s for w, s, _ in maps if w != "liar-0001") == ["done", "done"]  # the two that agreed
        (error,) = [e for w, _, e in maps if w == "liar-0001"]
        assert error.startswith("its output differs from the one workers ") and "agreed on" in error
        # Every task ran on two workers at least: the input and the reduce agreed at once.
        assert sorted(s for _, s, _ in rows(appliance, run["id"], -1)) == ["done", "done"]
        log = carol.http.get(f"/runs/{run['id']}/logs").text
        assert "the output of attempt 0 on worker liar-0001 is rejected" in log
        assert "(validation)" in log
        (points,) = appliance.query(
            f"SELECT rejections, points FROM fleet_worker_score_run WHERE run = {run['id']} AND worker_id = 'liar-0001'"
        )
        assert points[0] == 1 and points[1] < 0
        page = carol_client.get(f"/ui/runs/{run['id']}").text
        assert 'class="tl-bar tl-rejected"' in page
    finally:
        for w in [liar, *honest]:
            await w.close()


async def test_attempts_that_never_agree_fail_the_run(appliance, carol_client, carol):
    cookie = cookie_of(carol_client)
    liars = [
        await SimWorker(appliance.url, cookie, worker_id=f"liar-000{blob}", on_task=wrong_maps(blob)).start()
        for blob in "bcde"
    ]
    try:
        run = carol.run(carol.job(job_script(workers=1, **VALIDATED)))
        failed = await carol.wait(run["id"], timeout=30)
        assert failed["state"] == "failed"
        assert failed["reason"] == "stage 1 (map) on rank 0 of group A: 4 workers gave 4 different outputs; no 2 agreed"
        assert appliance.query(f"SELECT cause FROM jobs_run WHERE id = {run['id']}") == [("validation-failed",)]
    finally:
        for w in liars:
            await w.close()


def test_validation_needs_pmrfs_storage(carol):
    script = job_script(workers=1, **VALIDATED).replace("storageType = 'pmrfs'", "storageType = 's3'")
    response = carol.http.post("/jobs", json={"name": "s3-validated", "script": script})
    assert response.status_code == 400
    assert "validation compares outputs by their SHA-256, which only storageType 'pmrfs' keeps" in response.text
