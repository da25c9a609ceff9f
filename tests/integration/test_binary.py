"""The binary as IT installs it: the tarball that `make binary` builds, unpacked into a folder of its own,
serves, migrates, runs a job on `peermr worker`'s browsers, runs with no environment and a noexec
TMPDIR, and leaves nothing behind when killed or stopped."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from appliance import __version__
from tests.support import free_port

# The build runs on a cold cache in CI (2 cores): allow it well past the suite's default timeout.
pytestmark = [pytest.mark.binary, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
HEALTHY_TIMEOUT = 120
BUILD_TIMEOUT = 1100
OUTCOME = ROOT / "build" / "tests"  # the build's output and outcome, for whichever process runs this module
CHROMIUM = "/usr/bin/chromium"
USER_LIBRARY_PATH = "/opt/the-users-own-libraries"


@dataclass
class Build:
    tarball: Path
    executable: Path  # in the folder the tarball was unpacked into
    seconds: float

    @property
    def mib(self) -> float:
        return self.tarball.stat().st_size / 2**20


@dataclass
class Server:
    proc: subprocess.Popen
    data_dir: Path
    url: str
    tmpdir: Path
    stdout_path: Path
    stderr_path: Path
    seconds_to_healthy: float = 0.0

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


class Building:
    """The build, which takes minutes: tests/conftest.py starts it once when the session begins (in
    xdist's controller when the tests are spread over workers), so that it runs beside the other tests,
    and this module (run last) waits for its end in whichever process runs it. Its output and, once it
    has ended, its exit status and duration are files in OUTCOME."""

    running: Building | None = None  # the build this process started

    def __init__(self):
        env = {**os.environ, "PYTHON": sys.executable}  # build.sh makes its venv from this Python's base
        shutil.rmtree(OUTCOME, ignore_errors=True)  # a previous session's
        OUTCOME.mkdir(parents=True)
        self.started = time.monotonic()
        with open(OUTCOME / "stdout", "wb") as stdout, open(OUTCOME / "stderr", "wb") as stderr:
            self.proc = subprocess.Popen(
                [str(ROOT / "packaging" / "build.sh")],
                cwd=ROOT,
                env=env,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,  # its process group: PyInstaller stops with the script
            )
        self.ended = threading.Thread(target=self._record, daemon=True)
        self.ended.start()

    def _record(self) -> None:
        try:
            returncode = self.proc.wait(BUILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.stop()
            returncode = None
        status = {"returncode": returncode, "seconds": time.monotonic() - self.started}
        (OUTCOME / "status.part").write_text(json.dumps(status))
        (OUTCOME / "status.part").replace(OUTCOME / "status.json")  # whole when seen

    @classmethod
    def start(cls) -> None:
        cls.running = cls()

    @staticmethod
    def result() -> tuple[Path, float]:
        """The tarball built and the seconds the build took."""
        status_path = OUTCOME / "status.json"
        deadline = time.monotonic() + BUILD_TIMEOUT
        while not status_path.exists():
            if time.monotonic() > deadline:
                pytest.fail(f"the build, started with the session, has not ended after {BUILD_TIMEOUT} s")
            time.sleep(0.5)
        status = json.loads(status_path.read_text())
        if status["returncode"] is None:
            pytest.fail(f"the build took more than {BUILD_TIMEOUT} s")
        stdout, stderr = ((OUTCOME / name).read_text(errors="replace") for name in ("stdout", "stderr"))
        assert status["returncode"] == 0, f"build failed:\n{stdout[-5000:]}\n{stderr[-10000:]}"
        [tarball] = DIST.glob(f"peermr-{__version__}-linux-*.tar.xz")
        return tarball, status["seconds"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class Process(NamedTuple):
    pid: int
    parent: int
    name: str


def session_processes(sid: int) -> list[Process]:
    """The live processes of a session: what a command started with start_new_session left running,
    however its children were reparented."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            text = stat.read_text()
            name, _, rest = text.partition("(")[2].rpartition(")")
            state, parent, _, session = rest.split()[:4]
            if int(session) == sid and state != "Z":
                found.append(Process(int(stat.parent.name), int(parent), name))
    return found


def left_running(sid: int, timeout: float = 10) -> list[Process]:
    """The session's processes still there after up to ``timeout`` seconds of waiting for them to end."""
    deadline = time.monotonic() + timeout
    while (found := session_processes(sid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def bare(tmpdir: Path, *command: str | Path) -> list[str]:
    """``command`` under `env -i`: no environment but TMPDIR."""
    return ["env", "-i", f"TMPDIR={tmpdir}", *map(str, command)]


def wait_until_healthy(proc: subprocess.Popen, url: str, logs: list[Path]) -> None:
    deadline = time.monotonic() + HEALTHY_TIMEOUT
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the binary exited with {proc.returncode}:\n" + "\n".join(p.read_text() for p in logs))
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            pytest.fail(f"not healthy after {HEALTHY_TIMEOUT} s:\n" + "\n".join(p.read_text() for p in logs))
        time.sleep(0.05)


def start_serving(executable: Path, tmp: Path, tmpdir: Path) -> Server:
    """`peermr serve` on a fresh data dir under `env -i`, in a session of its own."""
    port = free_port()
    stdout_path, stderr_path = tmp / "stdout.log", tmp / "stderr.log"
    flags = ["--data-dir", tmp / "data", "--host", "127.0.0.1", "--port", str(port), "--turn-port", str(free_port())]
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        started = time.monotonic()
        proc = subprocess.Popen(
            bare(tmpdir, executable, "serve", *flags), stdout=out, stderr=err, start_new_session=True
        )
    srv = Server(proc, tmp / "data", f"http://127.0.0.1:{port}", tmpdir, stdout_path, stderr_path)
    try:
        wait_until_healthy(proc, srv.url, [stdout_path, stderr_path])
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    srv.seconds_to_healthy = time.monotonic() - started
    return srv


@pytest.fixture(scope="module")
def binary(tmp_path_factory) -> Build:
    tarball, seconds = Building.result()
    installed = tmp_path_factory.mktemp("installed")
    subprocess.run(["tar", "-xJf", str(tarball), "-C", str(installed)], check=True)
    return Build(tarball, installed / "peermr" / "peermr", seconds)


@pytest.fixture(scope="module")
def noexec_tmp(tmp_path_factory):
    """A tmpfs mounted noexec, as hardened servers mount /tmp."""
    if os.geteuid() != 0:
        pytest.skip("mounting a noexec tmpfs needs root")
    path = tmp_path_factory.mktemp("noexec")
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "noexec,nosuid,nodev,size=64m", "peermr-noexec", str(path)], check=True
    )
    yield path
    subprocess.run(["umount", "--lazy", str(path)], check=True)


@pytest.fixture(scope="module")
def server(binary, noexec_tmp, tmp_path_factory):
    tmpdir = noexec_tmp / "serve"
    tmpdir.mkdir()
    srv = start_serving(binary.executable, tmp_path_factory.mktemp("binary"), tmpdir)
    yield srv
    if srv.proc.poll() is None:
        srv.proc.kill()
        srv.proc.wait()


def run(binary: Build, *args: str, timeout: float = 120, **variables: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PEERMR_")} | variables
    return subprocess.run([str(binary.executable), *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_tarball_size_checksum_and_start_time(binary, server, noexec_tmp, capsys):
    listed = (binary.tarball.parent / f"{binary.tarball.name}.sha256").read_text().split()
    assert listed == [hashlib.sha256(binary.tarball.read_bytes()).hexdigest(), binary.tarball.name]
    assert binary.mib < 60

    tmpdir = noexec_tmp / "version"
    tmpdir.mkdir()
    started = time.monotonic()
    version = subprocess.run(bare(tmpdir, binary.executable, "version"), capture_output=True, text=True)
    seconds = time.monotonic() - started
    assert version.returncode == 0 and version.stdout.strip() == f"peermr {__version__}", version.stderr
    assert list(tmpdir.iterdir()) == []  # nothing unpacked
    with capsys.disabled():
        print(
            f"\n[binary] {binary.tarball.name}: {binary.mib:.1f} MiB, built in {binary.seconds:.0f} s; "
            f"`peermr version` {seconds:.2f} s, `serve` healthy {server.seconds_to_healthy:.2f} s after start",
            flush=True,
        )


def test_serves_health_login_and_static_files(server):
    health = httpx.get(f"{server.url}/healthz")
    assert health.status_code == 200 and health.json()["status"] == "ok"

    login = httpx.get(f"{server.url}/login")
    assert login.status_code == 200 and login.headers["content-type"].startswith("text/html")
    assert re.search(r'<input[^>]*type="password"', login.text)

    css = httpx.get(f"{server.url}/static/css/app.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert css.content == (ROOT / "static" / "css" / "app.css").read_bytes()


def test_migrations_ran_and_admin_login_printed(server):
    expected = set()
    for path in ROOT.glob("appliance/*/piccolo_migrations/*.py"):
        source = path.read_text()
        if match := re.search(r'^ID = "([^"]+)"', source, re.M):
            expected.add((path.parent.parent.name, match.group(1)))
    assert any(app == "accounts" for app, _ in expected)

    with contextlib.closing(sqlite3.connect(server.data_dir / "peermr.sqlite3")) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        ran = set(db.execute("SELECT app_name, name FROM migration"))
    assert "accounts_user" in tables
    assert ran == expected

    stdout = server.stdout()
    assert "Admin account:" in stdout and "One-time password:" in stdout


def test_migrate_on_a_fresh_data_dir(binary, tmp_path):
    result = run(binary, "migrate", "--data-dir", str(tmp_path / "fresh"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert (tmp_path / "fresh" / "peermr.sqlite3").is_file()


def account_token(binary: Build, server: Server, email: str, role: str) -> str:
    data_dir = ("--data-dir", str(server.data_dir))
    added = subprocess.run(
        [str(binary.executable), "user", "add", email, "--role", role, "--password-stdin", *data_dir],
        input="a-password-for-tests\n",
        capture_output=True,
        text=True,
    )
    assert added.returncode == 0, added.stderr
    created = run(binary, "token", "create", email, *data_dir)
    assert created.returncode == 0, created.stderr
    return created.stdout.split()[-1]


def test_saving_a_job_extracts_its_spec_inside_the_binary(binary, server):
    """The job SDK's recording engine (V8 through mini-racer) ships in the binary and works there."""
    token = account_token(binary, server, "spec@example.com", "coordinator")
    api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"})
    script = (ROOT / "docs" / "examples" / "charcount.js").read_text()
    job = api.post("/api/v1/jobs", json={"name": "charcount", "script": script}, timeout=30)
    assert job.status_code == 201, job.text
    assert [s["kind"] for s in job.json()["spec"]["stages"]] == ["map", "reduce", "map", "reduce"]
    broken = api.post("/api/v1/jobs", json={"name": "broken", "script": "new JobExecution('pmrfs');\n)"}, timeout=30)
    assert broken.status_code == 400 and broken.json()["extra"]["line"] == 2


WORDCOUNT = """
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 2;
execution.setInputFn(async function input() {
  return LINES;
});
execution.addStage(new MapStage(async function map(x) {
  for (const [, line] of x) {
    for (const word of line.split(' ')) if (word) context.emit(word, 1);
  }
  await context.onComplete();
}));
execution.addStage(new ReduceStage(async function reduce(keyToValues) {
  for (const word in keyToValues) context.emit(word, keyToValues[word].reduce((a, b) => a + b, 0));
  await context.onComplete();
}));
execution.start(jobRunner);
"""


def environment(pid: int) -> dict[str, str]:
    """A process's environment ({} once it has exited)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes().decode()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def wait_for_line(proc: subprocess.Popen, log: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"peermr worker never printed {text!r} (exit status {proc.poll()}):\n{log.read_text()}")
        time.sleep(0.2)


def test_a_job_runs_on_two_browsers_of_peermr_worker(binary, server, tmp_path):
    """serve, worker and job run, all from the binary: the README's word count comes out right, and the
    browsers run with the library path the user had, not the bundle's."""
    worker_token = account_token(binary, server, "fleet@example.com", "worker")
    coordinator_token = account_token(binary, server, "analyst@example.com", "coordinator")
    lines = [line for line in (ROOT / "README.md").read_text().splitlines() if line.strip()]
    script = tmp_path / "wordcount.js"
    script.write_text(WORDCOUNT.replace("LINES", json.dumps(lines)))
    log = tmp_path / "worker.log"
    command = [binary.executable, "worker", "--server", server.url, "--count", "2", "--chromium", CHROMIUM]
    command += ["--data-dir", tmp_path / "fleet"]
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [str(part) for part in command],
            env={**os.environ, "PEERMR_TOKEN": worker_token, "LD_LIBRARY_PATH": USER_LIBRARY_PATH},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for_line(worker, log, "2 workers joined", timeout=90)
        browsers = [environment(p.pid) for p in session_processes(worker.pid) if p.parent == worker.pid]
        assert [env.get("LD_LIBRARY_PATH") for env in browsers] == [USER_LIBRARY_PATH] * 2
        assert not [name for env in browsers for name in env if name.startswith(("_PYI", "LD_LIBRARY_PATH_"))]
        children = [p for p in session_processes(worker.pid) if p.pid != worker.pid]
        bundle = str(binary.executable.parent)
        assert not [p for p in children if bundle in environment(p.pid).get("LD_LIBRARY_PATH", "")]

        output = tmp_path / "out.jsonl"
        ran = run(binary, "job", "run", str(script), "--server", server.url, "--wait", "--output", str(output),
                  timeout=240, PEERMR_TOKEN=coordinator_token)  # fmt: skip
        assert ran.returncode == 0, ran.stdout + ran.stderr
        counted = dict(json.loads(line) for line in output.read_text().splitlines())
        assert counted == Counter(word for line in lines for word in line.split(" ") if word)
        # The appliance's WebRTC peer (aiortc, without PyAV) opened its probe's data channel to each browser.
        assert len(re.findall(r"worker \w+: direct", server.stderr())) >= 2, server.stderr()
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    assert worker.returncode == 0, log.read_text()
    assert left_running(worker.pid) == [], "browsers outlived peermr worker"


def test_sigkill_leaves_no_process_and_no_file(binary, noexec_tmp, tmp_path):
    tmpdir = noexec_tmp / "killed"
    tmpdir.mkdir()
    killed = start_serving(binary.executable, tmp_path, tmpdir)
    killed.proc.kill()
    killed.proc.wait()
    assert left_running(killed.proc.pid) == []
    assert list(tmpdir.iterdir()) == []


def test_stops_on_sigterm_without_tracebacks_or_leftovers(server):
    server.proc.send_signal(signal.SIGTERM)
    try:
        returncode = server.proc.wait(30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running 30 s after SIGTERM:\n{server.stderr()}")
    stderr = server.stderr()
    assert "Traceback" not in stderr, stderr
    # Uvicorn shuts down gracefully, then re-raises the signal so the exit status reports it.
    assert returncode in (0, -signal.SIGTERM), stderr
    assert left_running(server.proc.pid) == []
    assert list(server.tmpdir.iterdir()) == []
