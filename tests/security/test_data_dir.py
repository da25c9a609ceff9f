"""The data directory is its owner's alone: another user of the machine reads nothing there.

It was 0755 with the SQLite file, its WAL and the PMRFS blobs 0644, so any local account could
read job scripts, logs, the audit log and private outputs. These tests run under the usual umask
022, which the appliance and its commands must override themselves.
"""

from __future__ import annotations

import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.test_job_scheduling import token_for
from tests.support import ADMIN_EMAIL, Appliance, run_cli, running_on_postgres

SQLITE_FILES = ("peermr.sqlite3", "peermr.sqlite3-wal", "peermr.sqlite3-shm")
ADVICE = "Restrict it to this account with: chmod -R go-rwx {}"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def open_to_others(root: Path) -> list[str]:
    """Everything under ``root`` (itself included) that group or others may read, write or enter."""
    return [f"{p} {oct(mode(p))}" for p in [root, *root.rglob("*")] if mode(p) & 0o077]


def test_a_started_appliance_keeps_everything_to_its_own_user(appliance):
    api = httpx.Client(
        base_url=appliance.url, headers={"Authorization": f"Bearer {token_for(appliance, ADMIN_EMAIL)}"}, timeout=60
    )
    assert api.put("/api/v1/buckets/private-data").status_code == 201
    assert api.put("/api/v1/buckets/private-data/objects/salaries.csv?pin=true", content=b"ann,1").status_code == 201
    data = appliance.data_dir
    assert mode(data) == 0o700
    assert mode(data / "secrets.json") == 0o600
    if not running_on_postgres():
        assert [mode(data / name) for name in SQLITE_FILES] == [0o600] * 3
    blobs = [p for p in (data / "blobs").rglob("*") if p.is_file()]
    assert blobs and all(mode(p) == 0o600 for p in blobs)
    assert open_to_others(data) == []
    assert "chmod -R go-rwx" not in appliance.log()


def test_an_open_data_dir_is_reported_at_start_and_left_as_it_is(tmp_path):
    data = (tmp_path / "data").resolve()  # as the appliance names it
    data.mkdir()
    data.chmod(0o755)
    server = Appliance(data)
    try:
        server.start()
        log = server.log()
        assert f"{data} (drwxr-xr-x)" in log and ADVICE.format(data) in log
        # The operator's directory keeps its mode; what the appliance made in it is private.
        assert mode(data) == 0o755
        assert mode(data / "secrets.json") == 0o600
        if running_on_postgres():
            return
        assert mode(data / "peermr.sqlite3") == 0o600
        server.stop()

        # A database file left open is named too.
        data.chmod(0o700)
        (data / "peermr.sqlite3").chmod(0o644)
        before = len(server.log())
        server.start()
        warning = server.log()[before:]
        assert f"{data / 'peermr.sqlite3'} (-rw-r--r--)" in warning and ADVICE.format(data) in warning
        assert f"{data} (" not in warning
    finally:
        server.stop()


@pytest.mark.skipif(running_on_postgres(), reason="with PostgreSQL these commands make nothing in the data dir")
def test_commands_that_create_the_data_dir_make_it_private(tmp_path):
    data = tmp_path / "data"
    # The commands that work on existing data refuse a new data dir and make nothing (test_cli.py).
    refused = run_cli("token", "create", "eve@example.com", "--data-dir", str(data))
    assert refused.returncode == 1 and not data.exists()
    steps = [
        (["migrate"], None),
        (["user", "add", "eve@example.com", "--role", "coordinator", "--password-stdin"], "eve-password-1\n"),
        (["token", "create", "eve@example.com"], None),
        (["bill", "--period", "2025-01"], None),
    ]
    for command, stdin in steps:
        result = run_cli(*command, "--data-dir", str(data), input=stdin)
        assert result.returncode == 0, result.stderr
        assert mode(data) == 0o700
        assert (data / "peermr.sqlite3").exists() and open_to_others(data) == []


# Stands in for Chromium: writes into its profile as a browser would, then waits to be stopped.
FAKE_CHROMIUM = """#!/bin/sh
for arg; do case "$arg" in --user-data-dir=*) profile="${arg#--user-data-dir=}";; esac; done
mkdir -p "$profile/Default" && echo session > "$profile/Default/Cookies"
exec sleep 60
"""


def test_worker_profiles_are_private(appliance, tmp_path):
    chromium = tmp_path / "chromium"
    chromium.write_text(FAKE_CHROMIUM)
    chromium.chmod(0o755)
    data = tmp_path / "worker-data"
    token = token_for(appliance, ADMIN_EMAIL)
    runner = subprocess.Popen(
        [sys.executable, "-m", "appliance", "worker", "--server", appliance.url, "--token", token]
        + ["--chromium", str(chromium), "--data-dir", str(data)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    cookies = data / "worker-profiles" / "worker-0" / "Default" / "Cookies"
    try:
        deadline = time.monotonic() + 30
        while not cookies.exists() and runner.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cookies.exists(), f"the runner exited with {runner.poll()} before its browser wrote its profile"
        assert mode(data) == 0o700 and open_to_others(data) == []
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(20)
