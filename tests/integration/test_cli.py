"""The `peermr` command: clear messages and exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import appliance
from appliance import __version__
from tests.support import query, run_cli, running_on_postgres


def test_version():
    result = run_cli("version")
    assert result.returncode == 0 and result.stdout.strip() == f"peermr {__version__}"


def test_migrate_creates_the_store_and_is_idempotent(tmp_path):
    data = str(tmp_path / "data")
    first = run_cli("migrate", "--data-dir", data)
    assert first.returncode == 0 and "Applied" in first.stdout
    second = run_cli("migrate", "--data-dir", data)
    assert second.returncode == 0 and "up to date" in second.stdout
    if not running_on_postgres():
        assert (tmp_path / "data" / "peermr.sqlite3").is_file()
    assert query(tmp_path / "data", "select count(*) from accounts_user") == [(0,)]


def test_user_add_and_token_create(tmp_path):
    data = str(tmp_path / "data")
    where = "the PostgreSQL database" if running_on_postgres() else data  # where commands say they looked
    assert run_cli("migrate", "--data-dir", data).returncode == 0
    added = run_cli(
        "user",
        "add",
        "Ada@Example.com",
        "--role",
        "coordinator",
        "--password-stdin",
        "--data-dir",
        data,
        input="ada-password-1\n",
    )
    assert added.returncode == 0, added.stderr
    assert "Created coordinator ada@example.com" in added.stdout

    duplicate = run_cli(
        "user",
        "add",
        "ada@example.com",
        "--role",
        "worker",
        "--password-stdin",
        "--data-dir",
        data,
        input="another-password\n",
    )
    assert duplicate.returncode == 1 and "already exists" in duplicate.stderr

    generated = run_cli("user", "add", "bob@example.com", "--role", "worker", "--data-dir", data, input="")
    assert generated.returncode == 0 and "One-time password:" in generated.stdout

    weak = run_cli(
        "user", "add", "eve@example.com", "--role", "worker", "--password-stdin", "--data-dir", data, input="short\n"
    )
    assert weak.returncode == 1 and "at least 10 characters" in weak.stderr

    bad_role = run_cli("user", "add", "x@example.com", "--role", "boss", "--data-dir", data)
    assert bad_role.returncode == 2 and "invalid choice" in bad_role.stderr

    bad_email = run_cli(
        "user",
        "add",
        "not-an-email",
        "--role",
        "worker",
        "--password-stdin",
        "--data-dir",
        data,
        input="long-enough-pw\n",
    )
    assert bad_email.returncode == 1 and "not an email address" in bad_email.stderr

    token = run_cli("token", "create", "ada@example.com", "--data-dir", data)
    assert token.returncode == 0 and token.stdout.strip().startswith("pmr_")
    # Where the account and token were found is said, beside the token itself alone on stdout.
    assert len(token.stdout.split()) == 1 and f"API token for ada@example.com in {where}:" in token.stderr
    assert f"Created coordinator ada@example.com in {where}." in added.stdout

    missing = run_cli("token", "create", "nobody@example.com", "--data-dir", data)
    assert missing.returncode == 1 and f"no active account nobody@example.com in {where}" in missing.stderr


def test_admin_commands_refuse_a_data_dir_that_does_not_exist(tmp_path):
    """Run from the wrong folder, an admin command names the dir it looked in and creates nothing there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PEERMR_DATA_DIR", "PEERMR_DATABASE_URL")}
    for command in (
        ["token", "create", "admin@example.com"],
        ["user", "add", "ada@example.com", "--role", "worker", "--password-stdin"],
        ["bill", "--period", "2025-01"],
        ["audit", "verify"],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "appliance", *command],
            cwd=elsewhere,
            env={**env, "PYTHONPATH": str(Path(appliance.__file__).parent.parent)},
            input="ada-password-1\n",
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 1, (command, result.stderr)
        assert f"no appliance data in {elsewhere / 'peermr-data'}" in result.stderr, result.stderr
        assert "--data-dir" in result.stderr
    assert list(elsewhere.iterdir()) == []


def test_bad_configuration_is_reported(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "peermr.toml").write_text("port = 'eighty'\n")
    result = run_cli("migrate", "--data-dir", str(data))
    assert result.returncode == 1 and "invalid setting" in result.stderr and "port" in result.stderr
    (data / "peermr.toml").write_text("colour = 'blue'\n")
    result = run_cli("migrate", "--data-dir", str(data))
    assert result.returncode == 1 and "unknown setting(s) colour" in result.stderr


def test_unknown_command_is_a_usage_error():
    result = run_cli("frobnicate")
    assert result.returncode == 2 and "invalid choice" in result.stderr


def test_output_piped_into_a_reader_that_stops_ends_without_a_traceback():
    # As `peermr version | head -0` or `peermr fs ls | head`: the reader has gone when the command writes.
    proc = subprocess.Popen(
        [sys.executable, "-m", "appliance", "version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(60) == 141
    assert stderr == ""
