"""PMRFS with three real Chromium workers: replicas in browsers, downloads from browsers, churn.

Each worker is a persistent Chromium profile opened on /worker/start with a
stable worker id, so closing and reopening it brings back the same tab with
its IndexedDB blobs, as `peermr worker` does.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid

import httpx
import pytest
from playwright.sync_api import expect

from tests.browsers import launch_persistent
from tests.support import Appliance

pytestmark = pytest.mark.e2e
SIZE = 8 * 1024 * 1024


class Browser:
    def __init__(self, playwright, appliance: Appliance, token: str, profile):
        self.playwright, self.appliance, self.token, self.profile = playwright, appliance, token, profile
        self.worker_id = uuid.uuid4().hex
        self.context = None

    def open(self) -> None:
        self.context = launch_persistent(self.playwright.chromium, self.profile)
        page = self.context.new_page()
        page.goto(f"{self.appliance.url}/worker/start#token={self.token}&worker={self.worker_id}")
        expect(page.locator("#connection")).to_have_text("connected", timeout=60_000)

    def close(self) -> None:
        self.context.close()


def status(api: httpx.Client, bucket: str, key: str) -> dict:
    response = api.get(f"/api/v1/objects-status/{bucket}/{key}")
    assert response.status_code == 200, response.text
    return response.json()


def holders(state: dict) -> list[set[str]]:
    return [set(blob["replicas"]) for blob in state["blobs"]]


def wait_until(predicate, timeout: float, what: str, show=lambda: None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := predicate():
            return result
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last seen: {show()}")


def test_replicas_live_in_browsers_and_survive_churn(appliance: Appliance, playwright, tmp_path):
    appliance.add_user("data@example.com", "coordinator", "data-password-1")
    token = appliance.cli("token", "create", "data@example.com").stdout.strip()
    api = httpx.Client(base_url=appliance.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    payload = os.urandom(SIZE)
    browsers = [Browser(playwright, appliance, token, tmp_path / f"profile-{i}") for i in range(3)]
    try:
        for browser in browsers:
            browser.open()
        assert api.put("/api/v1/buckets/e2e-data").status_code in (200, 201)
        put = api.put(
            "/api/v1/buckets/e2e-data/objects/sample.bin?pin=false",
            content=payload,
            headers={"Content-Type": "application/octet-stream"},
        )
        assert put.status_code in (200, 201), put.text

        # Two browsers per blob, and the appliance's copy released once they hold it.
        worker_ids = {b.worker_id for b in browsers}
        state = wait_until(
            lambda: (
                (s := status(api, "e2e-data", "sample.bin"))
                and all(len(h & worker_ids) == 2 and "appliance" not in h for h in holders(s))
                and s
            ),
            90,
            "two browser replicas of every blob",
            lambda: status(api, "e2e-data", "sample.bin"),
        )
        assert state["available"] and state["pinned"] is False and len(state["blobs"]) == 2

        # The download is served by the browsers (the appliance has no copy left).
        download = api.get("/api/v1/buckets/e2e-data/objects/sample.bin")
        assert download.status_code == 200
        assert hashlib.sha256(download.content).hexdigest() == hashlib.sha256(payload).hexdigest()

        # Close one holder: the factor is restored from the other holder, browser to browser.
        first_blob_holders = holders(state)[0]
        gone = next(b for b in browsers if b.worker_id in first_blob_holders)
        gone.close()
        remaining = worker_ids - {gone.worker_id}
        wait_until(
            lambda: all(h == remaining for h in holders(status(api, "e2e-data", "sample.bin"))),
            90,
            "the replication factor restored on the two open browsers",
        )
        assert (
            hashlib.sha256(api.get("/api/v1/buckets/e2e-data/objects/sample.bin").content).digest()
            == hashlib.sha256(payload).digest()
        )

        # Close every holder: the object is unavailable.
        for browser in browsers:
            if browser.worker_id in remaining:
                browser.close()
        wait_until(lambda: not status(api, "e2e-data", "sample.bin")["available"], 30, "unavailability")
        assert api.get("/api/v1/buckets/e2e-data/objects/sample.bin").status_code == 503

        # Reopen one with the same profile: its blobs come back with it.
        comeback = next(b for b in browsers if b.worker_id in remaining)
        comeback.open()
        wait_until(lambda: status(api, "e2e-data", "sample.bin")["available"], 60, "availability again")
        again = api.get("/api/v1/buckets/e2e-data/objects/sample.bin")
        assert again.status_code == 200 and again.content == payload
        comeback.close()
    finally:
        for browser in browsers:
            try:
                browser.close()
            except Exception:
                pass
