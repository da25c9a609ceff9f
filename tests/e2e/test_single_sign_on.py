"""Single sign-on end to end: Chromium, the appliance, and a real OpenID provider (npm's oidc-provider).

The appliance trusts the provider for corp.example, maps its groups to roles, and has password
sign-in turned off except for the break-glass admin.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.oidc_provider import OidcProvider
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance

pytestmark = pytest.mark.e2e

CLIENT_ID = "peermr-appliance"
CLIENT_SECRET = "a-client-secret-for-tests"
USERS = {
    "ada": {"email": "ada@corp.example", "email_verified": True, "groups": ["peermr-admins", "staff"]},
    "dan": {"email": "dan@corp.example", "email_verified": True, "groups": ["data-science"]},
    "wes": {"email": "wes@corp.example", "email_verified": True, "groups": ["staff"]},
    "eve": {"email": "eve@elsewhere.example", "email_verified": True, "groups": ["data-science"]},
    "nomail": {"groups": ["data-science"]},
}


def sso_env(provider: OidcProvider, secret: str = CLIENT_SECRET) -> dict[str, str]:
    return {
        "PEERMR_SSO_ISSUER": provider.issuer,
        "PEERMR_SSO_CLIENT_ID": CLIENT_ID,
        "PEERMR_SSO_CLIENT_SECRET": secret,
        "PEERMR_SSO_SCOPES": "openid email groups",
        "PEERMR_SSO_NAME": "Corp ID",
        "PEERMR_SSO_ALLOWED_DOMAINS": "corp.example",
        "PEERMR_SSO_ROLE_GROUPS": "peermr-admins=admin, data-science=coordinator",
        "PEERMR_SSO_DEFAULT_ROLE": "worker",
        "PEERMR_PASSWORD_LOGIN": "false",
    }


@pytest.fixture(scope="module")
def sso(tmp_path_factory):
    """The provider, this module's appliance (its client at the provider) and a second, misconfigured one."""
    work = tmp_path_factory.mktemp("sso")
    good = Appliance(work / "good")
    wrong_secret = Appliance(work / "wrong-secret")
    clients = [
        {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "redirect_uris": [f"{a.url}/login/sso/callback"]}
        for a in (good, wrong_secret)
    ]
    # One client id with both appliances' callbacks: the second one only has the secret wrong.
    clients = [{**clients[0], "redirect_uris": clients[0]["redirect_uris"] + clients[1]["redirect_uris"]}]
    provider = OidcProvider(work, clients, USERS).start()
    good.env.update(sso_env(provider))
    wrong_secret.env.update(sso_env(provider, secret="not-the-client-secret"))
    good.start()
    yield provider, good, wrong_secret
    wrong_secret.stop()
    good.stop()
    provider.stop()


def sign_in_at_provider(page, login: str) -> None:
    """The provider's own pages: its sign-in form (any password), then consent."""
    page.locator("input[name=login]").fill(login)
    page.locator("input[name=password]").fill("any password")
    page.locator("button[type=submit]").click()
    consent = page.locator("button[type=submit]")
    consent.wait_for()
    consent.click()


def sso_sign_in(page, appliance: Appliance, login: str, path: str = "/login") -> None:
    page.goto(appliance.url + path)
    page.locator("#sso-sign-in").click()
    sign_in_at_provider(page, login)


def password_sign_in(page, email: str, password: str) -> None:
    """The password form of the sign-in page, folded away while password sign-in is off."""
    page.locator("#break-glass summary").click()
    page.locator("input[name=email]").fill(email)
    page.locator("input[name=password]").fill(password)
    page.locator("#password-sign-in button[type=submit]").click()


def account_row(appliance: Appliance, email: str) -> tuple | None:
    rows = appliance.query(f"SELECT role, active FROM accounts_user WHERE email = '{email}'")
    return rows[0] if rows else None


def audited(appliance: Appliance, action: str) -> list[tuple[str, str, dict]]:
    """The audit log's entries of ``action``, oldest first: who, on what, and the after values."""
    rows = appliance.query(f"SELECT actor, target, after FROM audit_entry WHERE action = '{action}' ORDER BY id")
    return [(actor, target, json.loads(after)) for actor, target, after in rows]


def refusals(appliance: Appliance) -> list[tuple[str, str, str]]:
    """Failed sign-ins as the audit log has them: who, how, and the reason they were told."""
    return [(actor, after["method"], after["reason"]) for actor, _, after in audited(appliance, "sign-in.failed")]


def test_first_sign_in_creates_the_account_with_the_role_its_groups_give(sso, page):
    provider, appliance, _ = sso
    assert account_row(appliance, "ada@corp.example") is None
    sso_sign_in(page, appliance, "ada")
    expect(page).to_have_url(re.compile(r"/ui$"))
    expect(page.locator("body")).to_contain_text("ada@corp.example")
    assert account_row(appliance, "ada@corp.example") == ("admin", 1)
    assert "sign-in: ada@corp.example (sso) from 127.0.0.1" in appliance.log()
    # The audit log has the account made at the first sign-in and the sign-in, both by ada herself.
    ada = "ada@corp.example"
    assert (ada, ada, {"role": "admin", "single_sign_on": True}) in audited(appliance, "account.created")
    assert (ada, ada, {"method": "sso"}) in audited(appliance, "sign-in")
    # An admin through the provider's group: Admin → Settings shows the sign-on settings, never the secret.
    page.goto(appliance.url + "/ui/admin/settings")
    section = page.locator("#single-sign-on")
    expect(section).to_contain_text(provider.issuer)
    expect(section).to_contain_text(CLIENT_ID)
    expect(section).to_contain_text("peermr-admins")
    assert CLIENT_SECRET not in page.content()

    # An account an admin made beforehand (a worker, with a one-time password) is the same person:
    # the provider's group makes it a coordinator, and no password change is asked for.
    assert appliance.cli("user", "add", "dan@corp.example", "--role", "worker").returncode == 0
    other = page.context.browser.new_context()
    try:
        sso_sign_in(other.new_page(), appliance, "dan")
        expect(other.pages[0]).to_have_url(re.compile(r"/ui$"))
    finally:
        other.close()
    assert account_row(appliance, "dan@corp.example") == ("coordinator", 1)
    assert appliance.query("SELECT must_change_password FROM accounts_user WHERE email = 'dan@corp.example'") == [(0,)]
    # The role the provider's group gave is recorded as dan's own doing at his sign-in, from his address.
    dan = "dan@corp.example"
    assert audited(appliance, "account.role")[-1] == (dan, dan, {"role": "coordinator"})
    assert appliance.query(f"SELECT address FROM audit_entry WHERE action = 'account.role' AND actor = '{dan}'") == [
        ("127.0.0.1",)
    ]
    assert (dan, dan, {"method": "sso"}) in audited(appliance, "sign-in")


def test_someone_in_no_mapped_group_gets_the_default_role_and_a_worker_tab_joins_as_them(sso, page):
    _, appliance, _ = sso
    # The worker page sends an employee who is not signed in to sign in, and back to it afterwards.
    page.goto(appliance.url + "/worker")
    expect(page).to_have_url(re.compile(r"/login\?next=%2Fworker"))
    page.locator("#sso-sign-in").click()
    sign_in_at_provider(page, "wes")
    expect(page).to_have_url(re.compile(r"/worker$"))
    expect(page.locator("#connection")).to_have_text("connected", timeout=60_000)
    assert account_row(appliance, "wes@corp.example") == ("worker", 1)
    # The fleet shows the page working for the employee's own account.
    admin = page.context.browser.new_context()
    try:
        fleet = admin.new_page()
        fleet.goto(appliance.url + "/login")
        password_sign_in(fleet, ADMIN_EMAIL, ADMIN_PASSWORD)
        fleet.goto(appliance.url + "/ui/workers")
        expect(fleet.locator("body")).to_contain_text("wes@corp.example", timeout=30_000)
    finally:
        admin.close()


def test_refused_domain_and_missing_email_are_told_and_create_nothing(sso, page):
    _, appliance, _ = sso
    sso_sign_in(page, appliance, "eve")
    expect(page.locator("#login-error")).to_contain_text("Accounts at elsewhere.example may not sign in here")
    assert account_row(appliance, "eve@elsewhere.example") is None
    assert (
        "refused sign-in: eve@elsewhere.example (sso) from 127.0.0.1: Accounts at elsewhere.example" in appliance.log()
    )
    assert page.context.cookies() and not any(c["name"] == "peermr_session" for c in page.context.cookies())

    # Another browser: the provider remembers eve in this one.
    other = page.context.browser.new_context()
    try:
        second = other.new_page()
        sso_sign_in(second, appliance, "nomail")
        expect(second.locator("#login-error")).to_contain_text("sent no email address")
    finally:
        other.close()
    # Both refusals are in the audit log: eve's under her email, the one without an email as anonymous.
    refused = [(actor, method, reason.split(" (")[0]) for actor, method, reason in refusals(appliance)]
    assert ("eve@elsewhere.example", "sso", "Accounts at elsewhere.example may not sign in here") in refused
    assert any(actor == "anonymous" and "sent no email address" in reason for actor, _, reason in refused)


def test_password_sign_in_is_off_except_for_the_break_glass_admin(sso, page):
    _, appliance, _ = sso
    appliance.add_user("local@corp.example", "coordinator", "local-password-1")
    page.goto(appliance.url + "/login")
    # Only the provider's button is offered; the password form is folded away for the admin.
    expect(page.locator("#sso-sign-in")).to_be_visible()
    expect(page.locator("#password-sign-in")).to_be_hidden()
    password_sign_in(page, "local@corp.example", "local-password-1")
    expect(page.locator("#login-error")).to_contain_text("Password sign-in is turned off here: sign in with Corp ID")
    assert not any(c["name"] == "peermr_session" for c in page.context.cookies())
    assert refusals(appliance)[-1] == (
        "local@corp.example",
        "password",
        "Password sign-in is turned off here: sign in with Corp ID.",
    )
    # The refused form comes back folded open, with the email typed.
    page.locator("input[name=email]").fill(ADMIN_EMAIL)
    page.locator("input[name=password]").fill(ADMIN_PASSWORD)
    page.locator("#password-sign-in button[type=submit]").click()
    expect(page).to_have_url(re.compile(r"/ui$"))
    expect(page.locator("body")).to_contain_text(ADMIN_EMAIL)


def test_a_wrong_client_secret_is_a_clear_error_on_the_sign_in_page(sso, page):
    _, _, wrong_secret = sso
    wrong_secret.start()
    sso_sign_in(page, wrong_secret, "dan")
    error = page.locator("#login-error")
    expect(error).to_contain_text("refused the appliance's client credentials (invalid_client")
    expect(error).to_contain_text("Check sso_client_id and sso_client_secret")
    assert account_row(wrong_secret, "dan@corp.example") is None
    # Nobody is named before the provider vouches for someone: the refusal is the anonymous caller's.
    [(actor, method, reason)] = refusals(wrong_secret)
    assert (actor, method) == ("anonymous", "sso") and "refused the appliance's client credentials" in reason
