"""Enrolment links: a browser joins as a worker of the link's account, within the link's limits."""

from __future__ import annotations

import re

from tests.support import Appliance, Client


def make_link(admin: Client, account_email: str, **fields) -> tuple[str, str]:
    page = admin.get("/ui/admin/enrolment").text
    account_id = re.search(rf'<option value="(\d+)"[^>]*>{re.escape(account_email)} ', page).group(1)
    created = admin.form("/ui/admin/enrolment", {"account_id": account_id, "label": "floor 3", **fields})
    assert created.status_code == 200, created.text[:500]
    url = re.search(r'id="new-link">([^<]+)<', created.text).group(1)
    link_id = max(int(i) for i in re.findall(r'id="link-(\d+)"', created.text))
    return url.rsplit("/enrol/", 1)[1], str(link_id)


def test_link_enrols_browsers_up_to_its_use_limit(appliance: Appliance, admin: Client):
    appliance.add_user("floor@example.com", "worker", "floor-password-1")
    token, _ = make_link(admin, "floor@example.com", max_uses="2", valid_hours="24")
    assert token.startswith("enr_")

    for _ in range(2):
        browser = appliance.client()
        # Opening the link does not use it (link previews and scanners open links too).
        preview = browser.get(f"/enrol/{token}")
        assert preview.status_code == 200 and "floor@example.com" in preview.text
        joined = browser.form(f"/enrol/{token}")
        assert joined.status_code == 303 and joined.headers["location"] == "/worker"
        worker_page = browser.get("/worker")
        assert worker_page.status_code == 200 and "floor@example.com" in worker_page.text
        # The worker cookie opens the worker page only, not the dashboard.
        assert browser.get("/ui").headers["location"].startswith("/login")

    third = appliance.client()
    refused = third.get(f"/enrol/{token}")
    assert refused.status_code == 410 and "used up" in refused.text
    assert third.form(f"/enrol/{token}").status_code == 410
    assert "2 / 2" in admin.get("/ui/admin/enrolment").text


def test_revoked_and_unknown_links_are_refused(appliance: Appliance, admin: Client):
    appliance.add_user("revoked@example.com", "worker", "revoked-password")
    token, link_id = make_link(admin, "revoked@example.com")
    assert admin.form(f"/ui/admin/enrolment/{link_id}/revoke").status_code == 303
    browser = appliance.client()
    response = browser.get(f"/enrol/{token}")
    assert response.status_code == 410 and "revoked" in response.text
    unknown = browser.get("/enrol/enr_not-a-real-token")
    assert unknown.status_code == 410 and "not valid" in unknown.text
    assert "revoked@example.com" not in unknown.text


def test_link_form_validation(appliance: Appliance, admin: Client):
    response = admin.form("/ui/admin/enrolment", {"account_id": "999999", "valid_hours": "24"})
    assert response.status_code == 400 and "active account" in response.text
    response = admin.form("/ui/admin/enrolment", {"account_id": "1", "valid_hours": "24", "max_uses": "0"})
    assert response.status_code == 400 and "at least 1" in response.text
    response = admin.form("/ui/admin/enrolment", {"account_id": "1", "valid_hours": "lots"})
    assert response.status_code == 400 and "whole number" in response.text
