"""The one-file executable: built with PyInstaller, it serves, migrates and finds its files."""

from __future__ import annotations

import contextlib
import importlib.util
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
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from appliance import __version__
from tests.support import free_port

# The build runs on a cold cache in CI (2 cores): allow it well past the suite's default timeout.
pytestmark = [pytest.mark.binary, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
BINARY = ROOT / "dist" / "peermr"
HEALTHY_TIMEOUT = 120
BUILD_TIMEOUT = 1100
OUTCOME = ROOT / "build" / "tests"  # the build's output and outcome, for whichever process runs this module


@dataclass
class Build:
    path: Path
    seconds: float

    @property
    def mib(self) -> float:
        return self.path.stat().st_size / 2**20


@dataclass
class Server:
    proc: subprocess.Popen
    data_dir: Path
    url: str
    stdout_path: Path
    stderr_path: Path
    seconds_to_healthy: float = 0.0

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def _env() -> dict[str, str]:
    """The caller's environment without PEERMR_* settings, so only the flags decide."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PEERMR_")}
    env["PEERMR_TURN_PORT"] = str(free_port())
    return env


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(BINARY), *args], capture_output=True, text=True, env=_env(), timeout=timeout)


class Building:
    """The PyInstaller build, which takes minutes: tests/conftest.py starts it once when the session
    begins (in xdist's controller when the tests are spread over workers), so that it runs beside the
    other tests, and this module (run last) waits for its end in whichever process runs it. Its output
    and, once it has ended, its exit status and duration are files in OUTCOME."""

    running: Building | None = None  # the build this process started

    def __init__(self):
        if importlib.util.find_spec("PyInstaller") is None:
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "pyinstaller>=6.10"], check=True)
        bin_dir = str(Path(sys.executable).parent)
        env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "PYTHON": sys.executable}
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
    def result() -> Build:
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
        assert BINARY.is_file() and os.access(BINARY, os.X_OK)
        return Build(BINARY, status["seconds"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture(scope="module")
def binary() -> Build:
    return Building.result()


@pytest.fixture(scope="module")
def server(binary, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("binary")
    data_dir = tmp / "data"
    port = free_port()
    stdout_path, stderr_path = tmp / "stdout.log", tmp / "stderr.log"
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        started = time.monotonic()
        proc = subprocess.Popen(
            [str(binary.path), "serve", "--data-dir", str(data_dir), "--host", "127.0.0.1", "--port", str(port)],
            env=_env(),
            stdout=out,
            stderr=err,
        )
    srv = Server(proc, data_dir, f"http://127.0.0.1:{port}", stdout_path, stderr_path)
    try:
        deadline = started + HEALTHY_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the binary exited with {proc.returncode}:\n{srv.stdout()}\n{srv.stderr()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{srv.url}/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"not healthy after {HEALTHY_TIMEOUT} s:\n{srv.stdout()}\n{srv.stderr()}")
            time.sleep(0.1)
        srv.seconds_to_healthy = time.monotonic() - started
        yield srv
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_build_size_and_start_time(binary, server, capsys):
    with capsys.disabled():
        print(
            f"\n[binary] dist/peermr: {binary.mib:.1f} MiB, built in {binary.seconds:.0f} s, "
            f"healthy {server.seconds_to_healthy:.2f} s after start",
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


def test_version(binary):
    result = _run("version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"peermr {__version__}"


def test_migrate_on_a_fresh_data_dir(binary, tmp_path):
    result = _run("migrate", "--data-dir", str(tmp_path / "fresh"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert (tmp_path / "fresh" / "peermr.sqlite3").is_file()


def test_saving_a_job_extracts_its_spec_inside_the_binary(server):
    """The job SDK's recording engine (V8 through mini-racer) ships in the binary and works there."""
    email = re.search(r"Admin account: (\S+)", server.stdout()).group(1)
    created = _run("token", "create", email, "--data-dir", str(server.data_dir))
    assert created.returncode == 0, created.stderr
    api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {created.stdout.split()[-1]}"})
    script = (ROOT / "docs" / "examples" / "charcount.js").read_text()
    job = api.post("/api/v1/jobs", json={"name": "charcount", "script": script}, timeout=30)
    assert job.status_code == 201, job.text
    assert [s["kind"] for s in job.json()["spec"]["stages"]] == ["map", "reduce", "map", "reduce"]
    broken = api.post("/api/v1/jobs", json={"name": "broken", "script": "new JobExecution('pmrfs');\n)"}, timeout=30)
    assert broken.status_code == 400 and broken.json()["extra"]["line"] == 2


def test_stops_on_sigterm_without_tracebacks(server):
    server.proc.send_signal(signal.SIGTERM)
    try:
        returncode = server.proc.wait(30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running 30 s after SIGTERM:\n{server.stderr()}")
    stderr = server.stderr()
    assert "Traceback" not in stderr, stderr
    # Uvicorn shuts down gracefully, then re-raises the signal so the exit status reports it.
    assert returncode in (0, -signal.SIGTERM), stderr
