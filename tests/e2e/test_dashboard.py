"""The dashboard in a real browser: sign-in, accounts, roles, htmx fragments."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance

pytestmark = pytest.mark.e2e
GENERIC = "That email and password do not match an active account."


def sign_in(page: Page, appliance: Appliance, email: str, password: str) -> None:
    page.goto(f"{appliance.url}/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


def test_admin_creates_a_coordinator_who_cannot_reach_admin_pages(page: Page, appliance: Appliance):
    page.goto(appliance.url)
    expect(page).to_have_url(re.compile(r"/login"))
    sign_in(page, appliance, ADMIN_EMAIL, ADMIN_PASSWORD)
    expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
    nav = page.get_by_role("navigation", name="Main")
    for label in ("Jobs", "Runs", "Workers", "Storage", "Billing", "Admin"):
        expect(nav.get_by_role("link", name=label)).to_be_visible()

    nav.get_by_role("link", name="Admin").click()
    expect(page).to_have_url(re.compile(r"/ui/admin/accounts$"))
    form = page.locator('form[action="/ui/admin/accounts"]')
    form.get_by_label("Email").fill("carol@example.com")
    form.get_by_label("Role").select_option("coordinator")
    form.get_by_label("Password").fill("carol-password-1")
    form.get_by_role("button", name="Create account").click()
    expect(page.get_by_role("status")).to_contain_text("carol@example.com can now sign in as coordinator")
    expect(page.locator('tr[data-email="carol@example.com"]')).to_be_visible()

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/login"))
    expect(page.get_by_role("status")).to_contain_text("You are signed out.")

    sign_in(page, appliance, "carol@example.com", "carol-password-1")
    expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Admin")).to_have_count(0)
    response = page.goto(f"{appliance.url}/ui/admin/accounts")
    assert response.status == 403
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    # Coordinators have a Billing page (tests/e2e/test_billing_pages.py shows it with usage).
    page.goto(f"{appliance.url}/ui/billing")
    expect(page.get_by_role("heading", name="Billing", exact=True)).to_be_visible()
    expect(page.locator("#usage-chart svg")).to_be_visible()


def test_wrong_password_does_not_reveal_whether_the_email_exists(page: Page, appliance: Appliance):
    sign_in(page, appliance, ADMIN_EMAIL, "wrong-password-1")
    expect(page.get_by_role("alert")).to_have_text(GENERIC)
    shown_for_existing = page.get_by_role("alert").inner_text()
    sign_in(page, appliance, "nobody-here@example.com", "wrong-password-1")
    expect(page.get_by_role("alert")).to_have_text(shown_for_existing)


def test_htmx_updates_rows_and_shows_a_token_once(page: Page, appliance: Appliance):
    appliance.add_user("dave@example.com", "worker", "dave-password-1")
    sign_in(page, appliance, ADMIN_EMAIL, ADMIN_PASSWORD)
    page.goto(f"{appliance.url}/ui/admin/accounts")
    row = page.locator('tr[data-email="dave@example.com"]')
    # Changing the select posts it with htmx and swaps the row in place, no reload.
    page.evaluate("window.__marker = 'same page'")
    row.get_by_label("Role of dave@example.com").select_option("coordinator")
    expect(row.get_by_label("Role of dave@example.com")).to_have_value("coordinator")
    page.wait_for_timeout(300)
    assert page.evaluate("window.__marker") == "same page"
    page.reload()
    expect(page.locator('tr[data-email="dave@example.com"]').get_by_label("Role of dave@example.com")).to_have_value(
        "coordinator"
    )

    page.goto(f"{appliance.url}/ui/tokens")
    page.get_by_label("Name").fill("e2e laptop")
    page.get_by_role("button", name="Create token").click()
    token = page.locator("#new-token").inner_text()
    assert token.startswith("pmr_")
    page.reload()
    expect(page.locator("#new-token")).to_have_count(0)
    expect(page.get_by_role("cell", name="e2e laptop")).to_be_visible()
