"""Signing in: generic failures, throttling, generated passwords, disabled accounts, sessions."""

from __future__ import annotations

import re

from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, Client

GENERIC = "That email and password do not match an active account."


def failed_login(client: Client, email: str, password: str):
    response = client.form("/login", {"email": email, "password": password})
    assert response.status_code in (400, 429), response.status_code
    return response


def error_text(response) -> str:
    match = re.search(r'id="login-error">([^<]+)<', response.text)
    assert match, response.text[:500]
    return match.group(1)


def test_wrong_password_and_unknown_email_look_the_same(appliance: Appliance):
    appliance.add_user("known@example.com", "coordinator", "known-password-1")
    client = appliance.client()
    wrong = failed_login(client, "known@example.com", "not-the-password")
    unknown = failed_login(client, "unknown@example.com", "not-the-password")
    assert wrong.status_code == unknown.status_code == 400
    assert error_text(wrong) == error_text(unknown) == GENERIC
    # The email typed is kept in the form, the password is not.
    assert 'value="known@example.com"' in wrong.text
    assert "not-the-password" not in wrong.text


def test_repeated_failures_are_throttled_for_existing_and_unknown_emails(appliance: Appliance):
    appliance.add_user("target@example.com", "coordinator", "target-password-1")
    for email in ("target@example.com", "ghost@example.com"):
        client = appliance.client()
        for _ in range(5):
            assert failed_login(client, email, "guess-guess-guess").status_code == 400
        refused = failed_login(client, email, "guess-guess-guess")
        assert refused.status_code == 429
        # The first wait is 30 s (tests/security/test_lockout.py: it grows, and is per address).
        retry_after = int(refused.headers["retry-after"])
        assert 25 <= retry_after <= 30
        assert error_text(refused) == (
            f"Too many failed attempts from this address: try again in {retry_after} seconds."
        )
    # Even the right password is refused from this address while it waits: guessing cannot continue.
    client = appliance.client()
    assert failed_login(client, "target@example.com", "target-password-1").status_code == 429
    # Other accounts are not affected.
    Client(appliance.url).login(ADMIN_EMAIL, ADMIN_PASSWORD)


def test_generated_password_must_be_changed_first(appliance: Appliance, admin: Client):
    page = admin.form("/ui/admin/accounts", {"email": "fresh@example.com", "role": "coordinator"}).text
    one_time = re.search(r'id="new-password">([^<]+)<', page).group(1)
    user = appliance.client()
    response = user.form("/login", {"email": "fresh@example.com", "password": one_time})
    assert response.headers["location"] == "/ui/account/password"
    # Everything else sends them back to the password page.
    assert user.get("/ui/tokens").headers["location"] == "/ui/account/password"
    weak = user.form(
        "/ui/account/password", {"current_password": one_time, "new_password": "short", "confirm_password": "short"}
    )
    assert weak.status_code == 400 and "at least 10 characters" in weak.text
    done = user.form(
        "/ui/account/password",
        {"current_password": one_time, "new_password": "my-own-password", "confirm_password": "my-own-password"},
    )
    assert done.status_code == 303
    assert user.get("/ui/tokens").status_code == 200
    again = appliance.client()
    assert failed_login(again, "fresh@example.com", one_time).status_code == 400
    again.login("fresh@example.com", "my-own-password")


def test_disabling_an_account_signs_it_out_and_refuses_sign_in(appliance: Appliance, admin: Client):
    appliance.add_user("leaver@example.com", "coordinator", "leaver-password")
    user = appliance.client()
    user.login("leaver@example.com", "leaver-password")
    token = appliance.cli("token", "create", "leaver@example.com").stdout.strip()
    assert user.get("/ui/jobs").status_code == 200
    page = admin.get("/ui/admin/accounts").text
    user_id = re.search(r'id="account-(\d+)" data-email="leaver@example.com"', page).group(1)
    assert admin.form(f"/ui/admin/accounts/{user_id}/active", {"active": "false"}).status_code == 303
    assert user.get("/ui/jobs").headers["location"].startswith("/login")
    assert appliance.client().get("/api/v1/me", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    assert error_text(failed_login(appliance.client(), "leaver@example.com", "leaver-password")) == GENERIC


def test_the_last_admin_cannot_be_disabled_or_demoted(appliance: Appliance, admin: Client):
    page = admin.get("/ui/admin/accounts").text
    admin_id = re.search(rf'id="account-(\d+)" data-email="{ADMIN_EMAIL}"', page).group(1)
    response = admin.form(f"/ui/admin/accounts/{admin_id}/role", {"role": "worker"}, follow_redirects=True)
    assert "last active admin" in response.text
    response = admin.form(f"/ui/admin/accounts/{admin_id}/active", {"active": "false"}, follow_redirects=True)
    assert "last active admin" in response.text
    assert admin.get("/ui/admin/accounts").status_code == 200


def test_sign_out_ends_the_session(appliance: Appliance):
    client = appliance.client()
    client.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    cookie = client.cookies["peermr_session"]
    assert client.form("/logout").status_code == 303
    stale = Client(appliance.url)
    stale.cookies.set("peermr_session", cookie)
    assert stale.get("/ui").headers["location"].startswith("/login")


def test_next_parameter_only_redirects_within_the_site(appliance: Appliance):
    client = appliance.client()
    response = client.form("/login", {"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD, "next": "//evil.example/x"})
    assert response.headers["location"] == "/ui"
    client = appliance.client()
    response = client.form("/login", {"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD, "next": "/ui/tokens"})
    assert response.headers["location"] == "/ui/tokens"


def test_session_cookie_is_httponly_and_samesite(appliance: Appliance):
    client = appliance.client()
    response = client.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    header = response.headers["set-cookie"].lower()
    assert "peermr_session=" in header and "httponly" in header and "samesite=lax" in header
