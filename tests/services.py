"""The engines of the tests past one machine, started by the tests: Debian's PostgreSQL, Redis and HAProxy.

Each runs as a child process in a temporary directory of its own, on 127.0.0.1 and a free port, and
is stopped at the end (by its fixture, or at exit at the latest). ``make test-tools`` installs them.
Under ``make test-postgres`` (``PEERMR_TEST_POSTGRES_URL`` set) the PostgreSQL of that run is used
instead of another one. The fixtures (registered in tests/conftest.py) start a server when a test first
asks for it, one per xdist worker.
"""

from __future__ import annotations

import atexit
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from tests.support import free_port


class ChildServer:
    """A server run as a child process in a temporary directory, its output in a log file there."""

    name = "server"
    stop_signal = signal.SIGTERM

    def __init__(self):
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix=f"peermr-{self.name}-"))
        self.log_path = self.directory / f"{self.name}.log"
        self.proc: subprocess.Popen | None = None

    def spawn(self, argv: list[str], **kwargs) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, **kwargs)
        atexit.register(self.stop)  # a session cut short leaves no server running

    def wait_until(self, ready: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log()}")
            if ready():
                return
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"{self.name} not ready after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(self.stop_signal)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
        atexit.unregister(self.stop)


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class PostgresServer(ChildServer):
    """A throwaway PostgreSQL cluster of Debian's newest server: ``url`` is a login role with CREATEDB
    (database ``postgres``), ``admin_url`` the superuser; :meth:`new_database` makes a fresh database.
    As root the cluster runs as the ``postgres`` system user (initdb refuses root)."""

    name = "postgres"
    stop_signal = signal.SIGINT  # fast shutdown: sessions are ended, nothing is waited for
    role = "peermr"

    def __init__(self):
        super().__init__()
        self.bin = newest_postgres_bin()
        self.password = secrets.token_hex(16)
        admin_password = secrets.token_hex(16)
        self.admin_url = f"postgresql://postgres:{admin_password}@127.0.0.1:{self.port}/postgres"
        self.url = f"postgresql://{self.role}:{self.password}@127.0.0.1:{self.port}/postgres"
        (self.directory / "admin-password").write_text(admin_password)
        self.as_postgres: dict = {}
        if os.geteuid() == 0:
            self.as_postgres = {"user": "postgres", "group": "postgres", "extra_groups": []}
            for path in (self.directory, self.directory / "admin-password"):
                shutil.chown(path, "postgres", "postgres")

    def start(self) -> PostgresServer:
        data = self.directory / "data"
        initdb = [str(self.bin / "initdb"), "-D", str(data), "-U", "postgres", "--auth=scram-sha-256"]
        initdb += ["--pwfile", str(self.directory / "admin-password"), "-E", "UTF8", "--locale=C.UTF-8"]
        result = subprocess.run(
            [*initdb, "--no-sync", "--no-instructions"],
            cwd=self.directory,
            capture_output=True,
            text=True,
            timeout=120,
            **self.as_postgres,
        )
        if result.returncode != 0:
            self.stop()
            raise RuntimeError(f"initdb failed: {result.stdout}{result.stderr}")
        # Loopback TCP only (no Unix socket); no fsync (a crash of the machine loses nothing we keep);
        # room for the connection pools of several appliances.
        options = ["fsync=off", "synchronous_commit=off", "full_page_writes=off", "max_connections=300"]
        server = [str(self.bin / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(self.port), "-k", ""]
        self.spawn(
            [*server, *(arg for option in options for arg in ("-c", option))], cwd=self.directory, **self.as_postgres
        )
        self.wait_until(lambda: "ready to accept connections" in self.log())
        psql(self.admin_url, f"CREATE ROLE {self.role} LOGIN CREATEDB PASSWORD '{self.password}'", self.bin)
        return self

    def new_database(self) -> str:
        """The URL of a fresh database (the role's own, reached with its credentials)."""
        return create_database(self.url, self.bin)


class ExistingPostgres:
    """The PostgreSQL a run was given (``make test-postgres``): nothing to start or stop."""

    def __init__(self, url: str):
        self.url = url

    def new_database(self) -> str:
        return create_database(self.url, newest_postgres_bin())

    def stop(self) -> None:
        pass


def psql(url: str, sql: str, bin: Path) -> None:
    command = [str(bin / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"psql {sql!r} failed: {result.stderr.strip()}")


def create_database(base_url: str, bin: Path) -> str:
    """A fresh database beside ``base_url``'s: only the database name of the URL changes."""
    name = f"peermr_test_{uuid.uuid4().hex[:12]}"
    psql(base_url, f'CREATE DATABASE "{name}"', bin)
    return urllib.parse.urlsplit(base_url)._replace(path="/" + name).geturl()


def newest_postgres_bin() -> Path:
    """The bin folder of the newest PostgreSQL server Debian's packages installed."""
    servers = [path.parent for path in Path("/usr/lib/postgresql").glob("*/bin/postgres")]
    if not servers:
        raise RuntimeError("no PostgreSQL server under /usr/lib/postgresql: make test-tools installs it")
    return max(servers, key=lambda path: int(path.parent.name))


def postgres_server() -> PostgresServer | ExistingPostgres:
    """A running PostgreSQL: the one ``PEERMR_TEST_POSTGRES_URL`` names, else a throwaway cluster."""
    if url := os.environ.get("PEERMR_TEST_POSTGRES_URL"):
        return ExistingPostgres(url)
    return PostgresServer().start()


class RedisServer(ChildServer):
    """Debian's redis-server, keeping nothing on disk; ``url`` is its database 0."""

    name = "redis"

    def __init__(self):
        super().__init__()
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.directory)]
        self.spawn([*argv, "--save", "", "--appendonly", "no", "--daemonize", "no"], cwd=self.directory)
        self.wait_until(self.answers)
        return self

    def answers(self) -> bool:
        try:
            with redis.Redis.from_url(self.url, socket_timeout=2) as client:
                return client.ping()
        except redis.ConnectionError:
            return False


def redis_server() -> RedisServer:
    return RedisServer().start()


class HAProxy(ChildServer):
    """Debian's HAProxy in the foreground with the configuration it is given; ready once every
    ``bind`` address of it accepts connections."""

    name = "haproxy"
    BIND = re.compile(r"^\s*bind\s+\S*:(\d+)", re.MULTILINE)

    def __init__(self, config_text: str):
        super().__init__()
        self.config_path = self.directory / "haproxy.cfg"
        self.config_path.write_text(config_text)
        self.ports = [int(port) for port in self.BIND.findall(config_text)]

    def start(self) -> HAProxy:
        haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
        check = subprocess.run([haproxy, "-c", "-f", str(self.config_path)], capture_output=True, text=True)
        if check.returncode != 0:
            self.stop()
            raise ValueError(f"HAProxy refuses the configuration: {check.stdout}{check.stderr}")
        self.spawn([haproxy, "-f", str(self.config_path), "-db"], cwd=self.directory)
        self.wait_until(lambda: all(accepts_connections(port) for port in self.ports))
        return self


def haproxy(config_text: str) -> HAProxy:
    return HAProxy(config_text).start()


@pytest.fixture(scope="session")
def postgres_service():
    """A PostgreSQL server for this worker's session (``url``, ``new_database()``)."""
    server = postgres_server()
    yield server
    server.stop()


@pytest.fixture
def postgres_database(postgres_service) -> str:
    """The URL of a fresh, empty database."""
    return postgres_service.new_database()


@pytest.fixture(scope="session")
def redis_service():
    """A Redis server for this worker's session (``url``)."""
    server = redis_server()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def haproxy_service():
    """Starts HAProxy with a configuration: ``haproxy_service(config_text)``; stopped at the module's end."""
    started: list[HAProxy] = []

    def start(config_text: str) -> HAProxy:
        proxy = HAProxy(config_text)
        started.append(proxy)
        return proxy.start()

    yield start
    for proxy in started:
        proxy.stop()
