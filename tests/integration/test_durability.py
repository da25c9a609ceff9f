"""A committed write survives the process being killed."""

from __future__ import annotations

import re

import pytest

from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, Client, running_on_postgres


def test_account_created_right_before_sigkill_survives(tmp_path):
    server = Appliance(tmp_path / "data").start()
    try:
        admin = Client(server.url)
        admin.login(ADMIN_EMAIL, ADMIN_PASSWORD)
        page = admin.form(
            "/ui/admin/accounts",
            {"email": "survivor@example.com", "role": "coordinator", "password": "survivor-password"},
        )
        assert page.status_code == 200 and "survivor@example.com" in page.text
        server.kill()  # SIGKILL: no shutdown hooks, no flush

        server.start()
        user = Client(server.url)
        assert user.login("survivor@example.com", "survivor-password").status_code == 303
        assert user.get("/ui/jobs").status_code == 200
        # The existing admin was not recreated or reset.
        accounts = Client(server.url)
        accounts.login(ADMIN_EMAIL, ADMIN_PASSWORD)
        assert len(re.findall(r'id="account-\d+"', accounts.get("/ui/admin/accounts").text)) == 2
    finally:
        server.stop()


@pytest.mark.skipif(
    running_on_postgres(), reason="WAL mode is a property of the SQLite store; this run uses PostgreSQL"
)
def test_sqlite_runs_in_wal_mode(tmp_path):
    import sqlite3

    server = Appliance(tmp_path / "data").start()
    server.stop()
    db = sqlite3.connect(server.data_dir / "peermr.sqlite3")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
