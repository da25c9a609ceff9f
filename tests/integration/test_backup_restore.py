"""`peermr backup` of a running appliance with a run in flight, and `peermr restore` into a new data
directory: the restored appliance has the same accounts, tokens and sessions, jobs, run outputs and
audit chain, and the run in flight goes on there (simulated workers, tests/sim_workers.py)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import stat

import httpx

from tests.integration.test_job_scheduling import Api, job_script, token_for
from tests.sim_workers import SimWorker, cookie_of, finish_empty
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance

OUTPUT = b'["apple",3]\n["pear",1]\n'


class Fleet:
    """Workers whose reduces write OUTPUT (kept, and PUT to the appliance when it asks for the run's
    final output) and whose maps finish once ``maps`` is set."""

    def __init__(self):
        self.maps = asyncio.Event()
        self.blobs: dict[str, bytes] = {}
        self.workers: list[SimWorker] = []
        self.serving: list[asyncio.Task] = []

    async def on_task(self, worker: SimWorker, task: dict) -> None:
        if task["kind"] == "map":
            await self.maps.wait()
        if task["kind"] != "reduce":
            return await finish_empty(worker, task)
        sha = hashlib.sha256(OUTPUT).hexdigest()
        self.blobs[sha] = OUTPUT
        worker.blobs.append(sha)
        output = {"partition": task["rank"], "size": len(OUTPUT), "records": 2, "sha256": sha}
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": [output], "emits": 2})

    async def upload(self, worker: SimWorker, http: httpx.AsyncClient) -> None:
        """Answer the appliance's blob-upload requests (copying a run's final output to it), as a page does."""
        while True:
            for message in [m for m in worker.messages if m["type"] == "blob-upload"]:
                worker.messages.remove(message)
                data = self.blobs[message["sha256"]]
                await http.put(message["url"], content=data)
                reply = {"type": "blob-uploaded", "replyTo": message["id"], "sha256": message["sha256"]}
                await worker.send({**reply, "size": len(data)})
            await asyncio.sleep(0.05)

    async def connect(self, appliance: Appliance, cookie: str, names: list[str]) -> None:
        http = httpx.AsyncClient(base_url=appliance.url, headers={"Cookie": cookie})
        for name in names:
            worker = await SimWorker(appliance.url, cookie, worker_id=name, on_task=self.on_task).start()
            self.workers.append(worker)
            self.serving.append(asyncio.create_task(self.upload(worker, http)))

    async def close(self) -> None:
        for task in self.serving:
            task.cancel()
        for worker in self.workers:
            await worker.close()
        self.workers, self.serving = [], []


def private(path) -> bool:
    return not stat.S_IMODE(path.stat().st_mode) & 0o077


async def test_a_backup_taken_during_a_run_restores_into_a_new_appliance(appliance_with, tmp_path):
    server = appliance_with(job_recovery_grace_seconds=2, job_replacement_grace_seconds=2)
    server.add_user("carol@example.com", "coordinator", "carol-password-1")
    admin = server.client()
    admin.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    cookie, token = cookie_of(admin), token_for(server, ADMIN_EMAIL)
    api = Api(server, token)
    fleet = Fleet()
    try:
        await fleet.connect(server, cookie, ["worker-one", "worker-two"])
        job = api.job(job_script(workers=2), name="fruit")
        fleet.maps.set()
        done = await api.wait(api.run(job)["id"])
        assert done["state"] == "succeeded", done
        output = api.http.get(f"/runs/{done['id']}/output").text
        assert '["apple",3]' in output

        fleet.maps.clear()  # the next run's maps hang: it is running while the backup is taken
        in_flight = api.run(job)["id"]
        await api.wait(in_flight, states=("running",))
        backup = tmp_path / "backup"
        taken = await asyncio.to_thread(server.cli, "backup", str(backup))
        assert taken.returncode == 0, taken.stderr
        assert "database, 1 blob(s)" in taken.stdout and "secrets.json" in taken.stdout, taken.stdout
        assert api.get(in_flight)["state"] == "running"  # the backup did not disturb it
    finally:
        await fleet.close()
    server.add_user("late@example.com", "worker", "late-password-1")  # after the backup: not restored
    assert all(private(path) for path in (backup, *backup.iterdir()))

    restored = Appliance(tmp_path / "restored")
    result = await asyncio.to_thread(restored.cli, "restore", str(backup))
    assert result.returncode == 0, result.stderr
    assert f"into {restored.data_dir}" in result.stdout
    again = await asyncio.to_thread(restored.cli, "restore", str(backup))
    assert again.returncode == 1 and "is not empty" in again.stderr
    verified = await asyncio.to_thread(restored.cli, "audit", "verify")
    assert verified.returncode == 0, verified.stderr

    server.stop()
    restored.start()
    try:
        same = Api(restored, token)  # the API token, like every account and session, came along
        assert same.http.get(f"/runs/{done['id']}/output").text == output
        assert [j["name"] for j in same.http.get("/jobs").json()] == ["fruit"]
        accounts = restored.query("SELECT email FROM accounts_user ORDER BY email")
        assert [email for (email,) in accounts] == [ADMIN_EMAIL, "carol@example.com"]
        fleet.maps.set()
        await fleet.connect(restored, cookie, ["worker-one", "worker-two"])  # the dashboard session is valid there too
        finished = await same.wait(in_flight)
        assert finished["state"] == "succeeded", finished
        assert same.http.get(f"/runs/{in_flight}/output").text == output
    finally:
        await fleet.close()
        with contextlib.suppress(Exception):
            restored.stop()
    assert (await asyncio.to_thread(restored.cli, "audit", "verify")).returncode == 0
