"""Test helpers: a real appliance process and a signed-in HTTP client."""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

ADMIN_EMAIL = "admin@example.com"
ADMIN_PASSWORD = "admin-password-for-tests"
CSRF_RE = re.compile(r'name="_csrf_token" value="([^"]+)"')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_database_url() -> str | None:
    """A fresh PostgreSQL database when the suite runs against PostgreSQL (make test-postgres)."""
    base = os.environ.get("PEERMR_TEST_POSTGRES_URL")
    if not base:
        return None
    name = f"peermr_test_{uuid.uuid4().hex[:12]}"
    subprocess.run(["psql", base, "-q", "-c", f"CREATE DATABASE {name}"], check=True)
    return base.rsplit("/", 1)[0] + "/" + name


class Appliance:
    """`peermr serve` as a subprocess on a temporary data directory."""

    def __init__(self, data_dir: Path, env: dict[str, str] | None = None):
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "PEERMR_ADMIN_EMAIL": ADMIN_EMAIL,
            "PEERMR_ADMIN_PASSWORD": ADMIN_PASSWORD,
            "PEERMR_TURN_PORT": str(free_port()),
            **(env or {}),
        }
        if "PEERMR_DATABASE_URL" not in self.env and (url := postgres_database_url()):
            self.env["PEERMR_DATABASE_URL"] = url
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-serve.log"

    def start(self, timeout: float = 60) -> Appliance:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "appliance",
                "serve",
                "--data-dir",
                str(self.data_dir),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
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
            time.sleep(0.2)
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


def run_cli(*args: str, input: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "appliance", *args], input=input, capture_output=True, text=True, env=env, timeout=120
    )


class Client(httpx.Client):
    """A browser-like client: keeps cookies, finds the CSRF token of the last page."""

    def __init__(self, base_url: str):
        super().__init__(base_url=base_url, follow_redirects=False, timeout=30)

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
