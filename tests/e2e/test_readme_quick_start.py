"""The README's quick start, pasted as one block into a shell in a checkout where `make run` serves the
appliance: the venv's `peermr` makes a token, starts two headless Chromium workers and runs the
character count example on the workers connected (it asks for 4), right after they start."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.support import ADMIN_PASSWORD

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
README_ADMIN = "admin@peermr.local"  # the first start's admin account, as the README shows it


def quick_start() -> str:
    """The shell block after "Your first job" in the README, as a reader would paste it."""
    after = (ROOT / "README.md").read_text().split("Your first job", 1)[1]
    return re.search(r"```sh\n(.*?)```", after, re.S).group(1)


def expected_counts() -> dict[str, int]:
    """What docs/examples/charcount.js counts in its own lines: characters by class."""
    lines = [f"line {i}: the quick brown fox jumps over the lazy dog" for i in range(1000)]
    classes = Counter(
        "letter" if ch.isalpha() else "digit" if ch.isdigit() else "space" if ch.isspace() else "other"
        for line in lines
        for ch in line
    )
    return dict(classes)


def test_the_readme_quick_start_runs_as_pasted(appliance_with, tmp_path):
    server = appliance_with(env={"PEERMR_ADMIN_EMAIL": README_ADMIN})
    admin = server.client()
    admin.login(README_ADMIN, ADMIN_PASSWORD)
    # This machine is busy with other tests: its browsers must not pause for it (Admin → Settings).
    assert admin.form("/ui/admin/settings/courtesy", {"core_share_percent": "50"}).status_code == 303
    checkout = tmp_path / "checkout"  # what the reader's second terminal sees: the venv, docs, peermr-data
    checkout.mkdir()
    # .venv: the virtualenv running the tests (a worktree has none of its own; PYTHONPATH picks its code).
    for name, target in ((".venv", Path(sys.prefix)), ("docs", ROOT / "docs"), ("peermr-data", server.data_dir)):
        (checkout / name).symlink_to(target)
    # As pasted, but for the appliance's port; the worker left in the background is stopped after.
    block = quick_start().replace("http://localhost:8000", server.url)
    script = block + '\nstatus=$?\nkill "$!"\nwait\nexit "$status"\n'
    env = {k: v for k, v in server.env.items() if not k.startswith(("PEERMR_DATA_DIR", "VIRTUAL_ENV"))}
    ran = subprocess.run(["bash", "-c", script], cwd=checkout, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    # The run takes the workers that joined (both, unless this busy machine started the second late).
    assert "2 workers joined" in ran.stdout and re.search(r"using the [12] connected worker\(s\) per group", ran.stderr)
    output = checkout / "out.jsonl"
    assert dict(json.loads(line) for line in output.read_text().splitlines()) == expected_counts()
    assert "all workers stopped" in ran.stdout
