"""`peermr worker`: headless Chromium workers started, restarted when they die, stopped on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, Client, run_cli

pytestmark = pytest.mark.e2e


def fleet_rows(admin: Client) -> list[str]:
    return re.findall(r'<tr data-worker="([^"]+)">.*?</tr>', admin.get("/ui/workers/live").text, re.S)


def wait_for(predicate, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.5)
    raise AssertionError("timed out")


def command_lines() -> list[str]:
    """Every process's command line, as `ps` shows them to any user of the machine."""
    lines = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass  # a process that ended meanwhile
    return lines


def test_runner_keeps_its_workers_connected(appliance: Appliance, tmp_path):
    appliance.add_user("farm@example.com", "worker", "farm-password-1")
    token = appliance.cli("token", "create", "farm@example.com").stdout.strip()
    admin = Client(appliance.url)
    admin.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    runner = subprocess.Popen(
        [sys.executable, "-m", "appliance", "worker", "--server", appliance.url, "--count", "2", "--ignore-busy"]
        + ["--data-dir", str(tmp_path / "farm")],
        env={**os.environ, "PEERMR_TOKEN": token},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    said: list[str] = []  # the runner's lines so far, read beside the test
    reader = threading.Thread(target=lambda: said.extend(iter(runner.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_for(lambda: "2 workers joined\n" in said)  # its check is done: a browser may die from now on
        first = wait_for(lambda: (ids := fleet_rows(admin)) and len(ids) == 2 and ids)
        assert "farm@example.com" in admin.get("/ui/workers/live").text
        # Neither the runner nor its browsers show the token to other users of the machine.
        assert not [line for line in command_lines() if token in line]
        # Kill one browser: the runner starts it again with the same profile and worker id.
        profile = tmp_path / "farm" / "worker-profiles" / "worker-0"
        browser = subprocess.run(  # the browser process: the oldest one using that profile
            ["pgrep", "-o", "-f", f"user-data-dir={profile}( |$)"], capture_output=True, text=True
        ).stdout.split()
        os.kill(int(browser[0]), signal.SIGKILL)
        wait_for(lambda: len(fleet_rows(admin)) < 2, timeout=60)
        again = wait_for(lambda: (ids := fleet_rows(admin)) and len(ids) == 2 and ids, timeout=90)
        assert sorted(again) == sorted(first)
    except AssertionError as exc:
        failed = exc
    else:
        failed = None
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(60)
        reader.join(10)
    output = "".join(said)
    assert failed is None, f"{failed}; the runner said:\n{output}"
    assert runner.returncode == 0, output
    assert "2 workers joined" in output and "restarting" in output and "all workers stopped" in output
    wait_for(lambda: not fleet_rows(admin), timeout=60)


def test_runner_refuses_bad_tokens_and_a_missing_chromium(appliance: Appliance, tmp_path):
    refused = run_cli("worker", "--server", appliance.url, "--token", "pmr_nope", "--data-dir", str(tmp_path))
    assert refused.returncode == 1 and "refused this token" in refused.stderr
    odd = run_cli("worker", "--server", appliance.url, "--token", "hello", "--data-dir", str(tmp_path))
    assert odd.returncode == 1 and "API token (pmr_...) or an enrolment token" in odd.stderr
    env = {**os.environ, "PATH": "/nonexistent"}
    missing = run_cli("worker", "--server", appliance.url, "--token", "pmr_x", "--data-dir", str(tmp_path), env=env)
    assert missing.returncode == 1 and "apt-get install chromium" in missing.stderr


def test_runner_says_why_its_browsers_cannot_join(appliance: Appliance, tmp_path):
    # An account made with a one-time password: its worker page would send the browser to change it.
    appliance.cli("user", "add", "new@example.com", "--role", "worker", input="")
    token_file = tmp_path / "token"
    token_file.write_text(appliance.cli("token", "create", "new@example.com").stdout)
    pending = run_cli("worker", "--server", appliance.url, "--token-file", str(token_file), "--data-dir", str(tmp_path))
    assert pending.returncode == 1
    assert "the account must change its one-time password first" in pending.stderr
    # A Chromium that cannot start: the runner stops at once and says so, instead of restarting it for ever.
    broken = tmp_path / "chromium"
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    token_file.write_text(appliance.cli("token", "create", ADMIN_EMAIL).stdout)
    started = time.monotonic()
    crashed = run_cli(
        "worker",
        "--server",
        appliance.url,
        "--token-file",
        str(token_file),
        "--chromium",
        str(broken),
        "--data-dir",
        str(tmp_path),
    )
    assert crashed.returncode == 1 and "worker 0's Chromium exited (3) before it joined" in crashed.stderr
    assert time.monotonic() - started < 30
