"""An installed wheel carries the templates and static files the appliance serves."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_contains_templates_static_and_migrations(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--quiet", "-w", str(tmp_path)],
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("peermr_appliance-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in (
        "appliance/templates/base.html",
        "appliance/templates/accounts/login.html",
        "appliance/static/css/app.css",
        "appliance/static/vendor/htmx/htmx.min.js",
        "appliance/static/vendor/htmx/LICENSE",
        "appliance/accounts/piccolo_app.py",
    ):
        assert expected in names, f"{expected} missing from {wheel.name}"
    assert any(n.startswith("appliance/accounts/piccolo_migrations/accounts_") for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "peermr = appliance.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
