"""The worker page in Chromium when its credential ends: it says why, shows how to join again, and
does not keep reconnecting with a cookie the appliance refuses."""

from __future__ import annotations

import contextlib
import sqlite3
import time

import pytest
from playwright.sync_api import expect

from tests.security.test_revocation import new_link
from tests.support import Appliance, Client, running_on_postgres

pytestmark = pytest.mark.e2e


def sockets_opened(page) -> list:
    """Every WebSocket the page opens from now on."""
    opened = []
    page.on("websocket", lambda socket: opened.append(socket))
    return opened


def test_a_revoked_link_stops_the_page_with_its_reason(appliance: Appliance, admin: Client, chromium):  # noqa: F811
    appliance.add_user("wendy@example.com", "worker", "wendy-password-1")
    token, link_id = new_link(appliance, admin, "wendy")
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(f"{appliance.url}/enrol/{token}")
        page.get_by_role("button", name="Join").click()
        expect(page.locator("#connection")).to_have_text("connected", timeout=30_000)
        opened = sockets_opened(page)

        admin.form(f"/ui/admin/enrolment/{link_id}/revoke")

        expect(page.locator("#connection")).to_have_text("signed out", timeout=10_000)
        expect(page.locator("#note")).to_have_text(
            "This tab stopped working for the appliance: the enrolment link this tab joined with was revoked."
        )
        expect(page.locator("#rejoin")).to_have_text(
            "To join again, open a new enrolment link from your administrator."
        )
        time.sleep(3)  # longer than the first reconnection delays
        assert opened == []
    finally:
        context.close()


@pytest.mark.skipif(running_on_postgres(), reason="expires a session in the SQLite file directly")
def test_a_page_whose_session_expired_while_away_stops_at_its_next_connection(
    appliance: Appliance,
    chromium,  # noqa: F811
):
    appliance.add_user("walt@example.com", "coordinator", "walt-password-1")
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(f"{appliance.url}/login?next=/worker")
        page.get_by_label("Email").fill("walt@example.com")
        page.get_by_label("Password").fill("walt-password-1")
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("#connection")).to_have_text("connected", timeout=30_000)

        # The appliance restarts; meanwhile the tab's session expires (its 30 days, or its link's, are up).
        appliance.stop()
        expect(page.locator("#connection")).to_contain_text("disconnected", timeout=30_000)
        with contextlib.closing(sqlite3.connect(appliance.data_dir / "peermr.sqlite3")) as db, db:
            db.execute("UPDATE accounts_session SET expires_at = '2000-01-01 00:00:00+00:00'")
        appliance.start()

        # Its next connection is refused; the page learns why from GET /worker/ice-servers (401) and stops.
        expect(page.locator("#connection")).to_have_text("signed out", timeout=60_000)
        expect(page.locator("#note")).to_contain_text("its sign-in is no longer valid")
        expect(page.locator("#rejoin")).to_contain_text("To join again, sign in.")
        opened = sockets_opened(page)
        time.sleep(3)
        assert opened == []
    finally:
        context.close()
