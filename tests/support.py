"""Test helpers: a real appliance process and a signed-in HTTP client."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import re
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from appliance.jobs.sandbox_policy import frame_policy, frame_url
from appliance.jobs.sandbox_routes import FRAME, FRAME_HEADER
from tests import forkserver

ADMIN_EMAIL = "admin@example.com"
ADMIN_PASSWORD = "admin-password-for-tests"
CSRF_RE = re.compile(r'name="_csrf_token" value="([^"]+)"')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def running_on_postgres() -> bool:
    """True when the suite runs against PostgreSQL (make test-postgres), not SQLite."""
    return bool(os.environ.get("PEERMR_TEST_POSTGRES_URL"))


# Data directory -> its PostgreSQL database: one store per data directory, as under SQLite.
_databases: dict[Path, str] = {}


def postgres_database_url(data_dir: Path | str | None = None) -> str | None:
    """A fresh PostgreSQL database when the suite runs against PostgreSQL (make test-postgres).

    ``PEERMR_TEST_POSTGRES_URL`` names a role with CREATEDB; each database created here is
    reached with the same credentials. With ``data_dir``, every call naming that directory gets
    the same database, so an appliance and the CLI commands run on its data directory share a
    store the way they share the SQLite file. None under SQLite.
    """
    base = os.environ.get("PEERMR_TEST_POSTGRES_URL")
    if not base:
        return None
    key = Path(data_dir).resolve() if data_dir is not None else None
    if key is not None and key in _databases:
        return _databases[key]
    name = f"peermr_test_{uuid.uuid4().hex[:12]}"
    result = subprocess.run(
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", base, "-c", f'CREATE DATABASE "{name}"'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode != 0:
        raise RuntimeError(f"could not create test database {name} with psql: {result.stderr.strip()}")
    # Only the database name changes: user, password, host, port and any ?sslmode=... are kept.
    url = urllib.parse.urlsplit(base)._replace(path="/" + name).geturl()
    if key is not None:
        _databases[key] = url
    return url


def query(data_dir: Path | str, sql: str, database_url: str | None = None) -> list[tuple]:
    """The rows of ``sql`` run against the store of the appliance on ``data_dir``.

    The SQLite file in the data directory, or under PostgreSQL ``database_url`` (default: the
    database :func:`postgres_database_url` gave that data directory).
    """
    if database_url and not database_url.startswith(("postgres://", "postgresql://")):
        database_url = None
    if database_url is None and running_on_postgres():
        database_url = _databases.get(Path(data_dir).resolve())
        if database_url is None:
            raise LookupError(f"no PostgreSQL database was created for {data_dir}")
    if database_url:
        return _postgres_rows(database_url, sql)
    path = Path(data_dir) / "peermr.sqlite3"
    if not path.is_file():  # sqlite3.connect would create an empty one
        raise FileNotFoundError(path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        return db.execute(sql).fetchall()


def _postgres_rows(database_url: str, sql: str) -> list[tuple]:
    import asyncpg

    async def fetch() -> list[tuple]:
        connection = await asyncpg.connect(database_url)
        try:
            return [tuple(row) for row in await connection.fetch(sql)]
        finally:
            await connection.close()

    # A thread of its own, so this works whether or not the caller runs in an event loop.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, fetch()).result()


def wait_until_serving(proc: subprocess.Popen, url: str, what: str, log_path: Path, timeout: float = 30) -> None:
    """Wait until ``url`` answers 200, or fail with the log of ``proc`` if it exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {log_path.read_text(errors='replace')}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} not up after {timeout}s: {log_path.read_text(errors='replace')}")


def terminate(proc: subprocess.Popen | None) -> None:
    """Stop a helper server: SIGTERM, then SIGKILL if it has not exited in 10 s."""
    if proc and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def serve_in_thread(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    """A threaded HTTP server with ``handler`` on a free loopback port, and its origin."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def reply_sandbox_frame(handler: QuietHandler, origin: str, query: str) -> None:
    """The appliance's sandbox frame (jobs/sandbox_routes.py), from a stand-in for the appliance at
    ``origin``: its scripts name it in the header ``sandbox_frame_header`` gives."""
    names = urllib.parse.parse_qs(query)
    csp = frame_policy(origin, names.get("script", []), names.get("connect", []))
    handler.reply(200, FRAME.encode(), "text/html", {"content-security-policy": csp})


def sandbox_frame_header(connect: list[str]) -> dict[str, str]:
    """The header of a sandbox script that may connect to ``connect`` beyond the appliance."""
    return {FRAME_HEADER: frame_url([], connect)}


class QuietHandler(BaseHTTPRequestHandler):
    """A test HTTP server's handler that logs nothing and answers with ``reply``."""

    def log_message(self, *args):
        pass

    def reply(self, status: int, body: bytes = b"", content_type: str = "text/plain", headers: dict | None = None):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.send_header("cache-control", "no-store")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class Appliance:
    """`peermr serve` as a subprocess on a temporary data directory."""

    def __init__(self, data_dir: Path, env: dict[str, str] | None = None):
        self.data_dir = data_dir
        self.port = free_port()
        self.env = {
            **os.environ,
            "PEERMR_ADMIN_EMAIL": ADMIN_EMAIL,
            "PEERMR_ADMIN_PASSWORD": ADMIN_PASSWORD,
            "PEERMR_TURN_PORT": str(free_port()),
            # A test's teardown stops the appliance with tasks that never end still running; tests
            # that close workers mid-task wait less for them to reconnect.
            "PEERMR_SHUTDOWN_GRACE_SECONDS": "2",
            "PEERMR_JOB_RECONNECT_GRACE_SECONDS": "2",
            **(env or {}),
        }
        if "PEERMR_DATABASE_URL" not in self.env and (url := postgres_database_url(data_dir)):
            self.env["PEERMR_DATABASE_URL"] = url
        # Ports chosen here may be taken by another process of the machine before the appliance binds
        # them (free_port only found them free): start then tries new ones.
        self.own_turn_port = "PEERMR_TURN_PORT" not in (env or {})
        self.proc: subprocess.Popen | forkserver.ForkedProcess | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-serve.log"

    @property
    def url(self) -> str:
        # With a certificate (PEERMR_TLS_CERT) it serves HTTPS only; the test trusts its CA (SSL_CERT_FILE).
        return f"{'https' if self.env.get('PEERMR_TLS_CERT') else 'http'}://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60, tries: int = 3) -> Appliance:
        for _ in range(tries - 1):
            began = len(self.log())
            try:
                return self._start(timeout)
            except RuntimeError:
                if "address already in use" not in self.log()[began:].lower():  # "[Errno 98] Address ..."
                    raise
            self.port = free_port()
            if self.own_turn_port:
                self.env["PEERMR_TURN_PORT"] = str(free_port())
        return self._start(timeout)

    def _start(self, timeout: float) -> Appliance:
        args = ["serve", "--data-dir", str(self.data_dir), "--host", "127.0.0.1", "--port", str(self.port)]
        with open(self.log_path, "ab") as log:
            if forkserver.enabled:
                self.proc = forkserver.popen(args, self.env, stdout=log.fileno(), stderr=log.fileno())
            else:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "appliance", *args], env=self.env, stdout=log, stderr=subprocess.STDOUT
                )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"appliance exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"appliance not healthy after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def cli(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return run_cli(*args, "--data-dir", str(self.data_dir), input=input, env=self.env)

    def add_user(self, email: str, role: str, password: str) -> None:
        result = self.cli("user", "add", email, "--role", role, "--password-stdin", input=password + "\n")
        assert result.returncode == 0, result.stderr

    def client(self) -> Client:
        return Client(self.url)

    def query(self, sql: str) -> list[tuple]:
        """The rows of ``sql`` run against this appliance's store (SQLite file or PostgreSQL)."""
        return query(self.data_dir, sql, self.env.get("PEERMR_DATABASE_URL"))


def run_cli(*args: str, input: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    # Under PostgreSQL a command on a data directory uses that directory's database.
    if env is None and "--data-dir" in args[:-1]:
        if url := postgres_database_url(args[args.index("--data-dir") + 1]):
            env = {**os.environ, "PEERMR_DATABASE_URL": url}
    if forkserver.enabled:
        return forkserver.run(list(args), dict(os.environ) if env is None else env, input=input, timeout=120)
    return subprocess.run(
        [sys.executable, "-m", "appliance", *args], input=input, capture_output=True, text=True, env=env, timeout=120
    )


class Client(httpx.Client):
    """A browser-like client: keeps cookies, finds the CSRF token of the last page."""

    def __init__(self, base_url: str, **kwargs):
        """``kwargs`` go to httpx.Client (a transport bound to another loopback address, for one)."""
        super().__init__(base_url=base_url, follow_redirects=False, timeout=30, **kwargs)

    def csrf(self) -> str:
        """The CSRF token forms carry: the value of the csrftoken cookie any page sets."""
        if "csrftoken" not in self.cookies:
            page = self.get("/login")
            match = CSRF_RE.search(page.text)
            assert match or "csrftoken" in self.cookies, "no CSRF token issued"
        return self.cookies["csrftoken"]

    def form(self, path: str, data: dict | None = None, **kwargs) -> httpx.Response:
        return self.post(path, data={**(data or {}), "_csrf_token": self.csrf()}, **kwargs)

    def login(self, email: str, password: str) -> httpx.Response:
        response = self.form("/login", {"email": email, "password": password})
        assert response.status_code == 303, f"login of {email} failed: {response.status_code} {response.text[:500]}"
        return response


def random_password() -> str:
    return secrets.token_urlsafe(12)


def save_and_run(api: httpx.Client, name: str, script: str, **overrides) -> int:
    """Save a job through the API and start a run of it; the run's id."""
    job = api.post("/jobs", json={"name": name, "script": script})
    assert job.status_code == 201, job.text
    run = api.post(f"/jobs/{job.json()['id']}/runs", json=overrides)
    assert run.status_code == 201, run.text
    return run.json()["id"]


def wait_for_run(api: httpx.Client, run_id: int, timeout: float = 180) -> dict:
    """The run (as the API shows it) once it ended."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        # Answered at the run's end, or after 2 s (under httpx's default 5 s timeout).
        run = api.get(f"/runs/{run_id}", params={"wait": min(left, 2)}).json()
        if run["state"] in ("succeeded", "failed", "cancelled"):
            return run
    raise AssertionError(f"run {run_id} did not end: {run}")
