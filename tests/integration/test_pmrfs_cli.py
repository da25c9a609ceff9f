"""`peermr fs` end to end against a running appliance."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from tests.support import ADMIN_EMAIL, run_cli

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def fs(appliance):
    """Runs `peermr fs ...` as a coordinator, with --server and --token."""
    appliance.add_user("cli-coordinator@example.com", "coordinator", "cli-password-1")
    token = appliance.cli("token", "create", "cli-coordinator@example.com").stdout.strip()

    def run(*args: str, env: dict | None = None):
        return run_cli("fs", *args, "--server", appliance.url, "--token", token, env=env)

    run.token = token
    run.server = appliance.url
    return run


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_mb_put_ls_get_stat_rm(fs, tmp_path):
    made = fs("mb", "cli-reports")
    assert made.returncode == 0, made.stderr
    assert "created bucket cli-reports" in made.stdout

    data = os.urandom(9 * MiB + 5)
    source = tmp_path / "big.bin"
    source.write_bytes(data)
    put = fs("put", str(source), "cli-reports/in/big.bin")
    assert put.returncode == 0, put.stderr
    assert f"{9 * MiB + 5} bytes" in put.stdout

    # KEY defaults to the file's name; --no-pin; the content type is guessed from the name.
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    assert fs("put", str(notes), "cli-reports", "--no-pin").returncode == 0

    buckets = fs("ls")
    assert buckets.returncode == 0 and "cli-reports" in buckets.stdout and "2 objects" in buckets.stdout
    listing = fs("ls", "cli-reports")
    assert listing.returncode == 0
    lines = listing.stdout.splitlines()
    assert [line.split()[-1] for line in lines] == ["in/big.bin", "notes.txt"]
    assert "pinned" in lines[0] and "pinned" not in lines[1]
    assert [line.split()[-1] for line in fs("ls", "cli-reports/in/").stdout.splitlines()] == ["in/big.bin"]

    target = tmp_path / "copy.bin"
    got = fs("get", "cli-reports/in/big.bin", str(target))
    assert got.returncode == 0, got.stderr
    assert sha(target.read_bytes()) == sha(data)
    assert not (tmp_path / "copy.bin.part").exists()

    to_stdout = run_cli("fs", "get", "cli-reports/notes.txt", "-", "--server", fs.server, "--token", fs.token)
    assert to_stdout.returncode == 0 and to_stdout.stdout == "hello\n"

    stat = fs("stat", "cli-reports/in/big.bin")
    assert stat.returncode == 0, stat.stderr
    status = json.loads(stat.stdout)
    assert {k: status[k] for k in ("size", "available", "pinned")} == {
        "size": 9 * MiB + 5,
        "available": True,
        "pinned": True,
    }
    assert [b["size"] for b in status["blobs"]] == [4 * MiB, 4 * MiB, MiB + 5]
    assert all(b["replicas"] == ["appliance"] for b in status["blobs"])
    assert json.loads(fs("stat", "cli-reports/notes.txt").stdout)["content_type"] == "text/plain"
    assert json.loads(fs("stat", "cli-reports/notes.txt").stdout)["pinned"] is False

    not_empty = fs("rm", "cli-reports")
    assert not_empty.returncode == 1 and "not empty" in not_empty.stderr
    assert fs("rm", "cli-reports/notes.txt").returncode == 0
    assert fs("rm", "cli-reports", "--force").returncode == 0
    assert "cli-reports" not in fs("ls").stdout


def test_clear_errors_and_exit_status(fs, appliance, tmp_path):
    missing = fs("ls", "reports")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "peermr: bucket reports not found"

    assert fs("mb", "cli-errors").returncode == 0
    no_object = fs("get", "cli-errors/nothing.txt", str(tmp_path / "x"))
    assert no_object.returncode == 1 and "object cli-errors/nothing.txt not found" in no_object.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.part").exists()

    bad_name = fs("mb", "Bad_Name")
    assert bad_name.returncode == 1 and "bucket name" in bad_name.stderr.lower()

    no_file = fs("put", str(tmp_path / "absent.bin"), "cli-errors/a")
    assert no_file.returncode == 1 and "no such file" in no_file.stderr

    bad_token = run_cli("fs", "ls", "--server", appliance.url, "--token", "pmr_not-a-token")
    assert bad_token.returncode == 1 and "refused the token" in bad_token.stderr

    unreachable = run_cli("fs", "ls", "--server", "http://127.0.0.1:9", "--token", fs.token)
    assert unreachable.returncode == 1 and "cannot reach http://127.0.0.1:9" in unreachable.stderr

    nothing = run_cli("fs", "ls", env={k: v for k, v in os.environ.items() if not k.startswith("PEERMR_")})
    assert nothing.returncode == 1 and "PEERMR_SERVER" in nothing.stderr

    # A worker account cannot make buckets.
    appliance.add_user("cli-worker@example.com", "worker", "cli-password-1")
    worker_token = appliance.cli("token", "create", "cli-worker@example.com").stdout.strip()
    refused = run_cli("fs", "mb", "workers-bucket", "--server", appliance.url, "--token", worker_token)
    assert refused.returncode == 1 and refused.stderr.startswith("peermr: ") and "access" in refused.stderr


def test_server_and_token_from_the_environment(appliance, fs, tmp_path):
    env = {**os.environ, "PEERMR_SERVER": appliance.url, "PEERMR_TOKEN": fs.token}
    assert run_cli("fs", "mb", "cli-env", env=env).returncode == 0
    source = tmp_path / "zero.bin"
    source.write_bytes(b"")
    assert run_cli("fs", "put", str(source), "cli-env/empty", env=env).returncode == 0
    target = tmp_path / "zero.out"
    got = run_cli("fs", "get", "cli-env/empty", str(target), env=env)
    assert got.returncode == 0, got.stderr
    assert target.read_bytes() == b""
    # The admin sees the bucket too; another coordinator does not.
    admin_token = appliance.cli("token", "create", ADMIN_EMAIL).stdout.strip()
    admin_ls = run_cli("fs", "ls", env={**env, "PEERMR_TOKEN": admin_token})
    assert "cli-env" in admin_ls.stdout
