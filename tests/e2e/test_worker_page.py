"""The worker page in Chromium: it connects, shows its account, pauses, and comes back after a restart."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, Client

pytestmark = pytest.mark.e2e


def test_worker_page_connects_pauses_and_reconnects_after_restart(chromium, tmp_path):
    server = Appliance(tmp_path / "data").start()
    context = chromium.new_context()
    try:
        admin = Client(server.url)
        admin.login(ADMIN_EMAIL, ADMIN_PASSWORD)
        server.add_user("wanda@example.com", "worker", "wanda-password")
        page_html = admin.get("/ui/admin/enrolment").text
        account_id = re.search(r'<option value="(\d+)">wanda@example.com', page_html).group(1)
        created = admin.form("/ui/admin/enrolment", {"account_id": account_id, "label": "e2e", "valid_hours": "24"})
        link = re.search(r'id="new-link">([^<]+)<', created.text).group(1)

        page = context.new_page()
        page.goto(link)
        page.get_by_role("button", name="Join").click()
        expect(page).to_have_url(re.compile(r"/worker$"))
        expect(page.locator("#connection")).to_have_text("connected", timeout=30_000)
        expect(page.locator("#worker")).to_contain_text("wanda@example.com")
        expect(page.locator("#state")).to_have_text("waiting for work")
        expect(page.locator("#stored")).to_have_text("0 blobs, 0 B")
        worker_id = page.locator("#worker-id").inner_text()

        fleet = admin.get("/ui/workers/live").text
        assert f'data-worker="{worker_id}"' in fleet and "wanda@example.com" in fleet
        # The appliance's WebRTC probe reaches the browser directly (same machine) and measures the round trip.
        deadline = time.monotonic() + 40
        while "direct" not in (row := worker_row(admin, worker_id)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert '<td class="connectivity">direct <span' in row and re.search(
            r'class="muted small rtt">[\d.]+ ms<', row
        ), row

        page.get_by_role("button", name="Pause").click()
        expect(page.locator("#state")).to_have_text("paused")
        assert "paused" in admin.get("/ui/workers/live").text

        # A second tab is a second worker with its own id.
        other = context.new_page()
        other.goto(f"{server.url}/worker")
        expect(other.locator("#connection")).to_have_text("connected", timeout=30_000)
        assert other.locator("#worker-id").inner_text() != worker_id

        server.stop()
        expect(page.locator("#connection")).to_contain_text("disconnected", timeout=30_000)
        server.start()
        expect(page.locator("#connection")).to_have_text("connected", timeout=60_000)
        # Same tab, same worker id, and it stays paused as the person left it.
        assert page.locator("#worker-id").inner_text() == worker_id
        expect(page.locator("#state")).to_have_text("paused")
        admin = Client(server.url)
        admin.login(ADMIN_EMAIL, ADMIN_PASSWORD)
        assert f'data-worker="{worker_id}"' in admin.get("/ui/workers/live").text
    finally:
        context.close()
        server.stop()


def worker_row(admin: Client, worker_id: str) -> str:
    match = re.search(rf'<tr data-worker="{worker_id}">.*?</tr>', admin.get("/ui/workers/live").text, re.S)
    return match.group(0) if match else ""
