"""CSRF on forms, and API tokens: shown once, stored hashed, revocable, last use recorded."""

from __future__ import annotations

import hashlib
import re

from tests.support import ADMIN_EMAIL, Appliance, Client


def test_form_without_csrf_token_is_refused_and_changes_nothing(appliance: Appliance, admin: Client):
    before = admin.get("/ui/tokens").text.count("<tr>")
    response = admin.post("/ui/tokens", data={"name": "forged"})
    assert response.status_code == 403
    assert "expired or came from another site" in response.text
    forged = admin.post("/ui/tokens", data={"name": "forged", "_csrf_token": "0" * 128})
    assert forged.status_code == 403
    assert admin.get("/ui/tokens").text.count("<tr>") == before
    assert admin.form("/ui/tokens", {"name": "genuine"}).status_code == 200


def test_login_form_needs_csrf_token_too(appliance: Appliance):
    client = appliance.client()
    response = client.post("/login", data={"email": "a@example.com", "password": "x"})
    assert response.status_code == 403


def test_api_token_lifecycle(appliance: Appliance, admin: Client):
    page = admin.form("/ui/tokens", {"name": "laptop"}).text
    token = re.search(r'id="new-token">([^<]+)<', page).group(1)
    assert token.startswith("pmr_")
    # Shown once: the list afterwards has only its prefix.
    listing = admin.get("/ui/tokens").text
    assert token not in listing and token[:12] in listing
    # Stored as a hash, never in the clear.
    stored = [row[0] for row in appliance.query("select token_hash from accounts_api_token")]
    assert hashlib.sha256(token.encode()).hexdigest() in stored
    assert not any(token in value for value in stored)
    hashes = [row[0] for row in appliance.query("select password_hash from accounts_user")]
    assert hashes and all(h.startswith("$argon2id$") for h in hashes)

    api = Client(appliance.url)
    me = api.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert me.status_code == 200 and me.json() == {"email": ADMIN_EMAIL, "role": "admin"}
    row = re.search(r"<td>laptop</td>.*?</tr>", admin.get("/ui/tokens").text, re.S).group(0)
    assert "never" not in row  # last used is recorded

    token_id = re.search(r"<td>laptop</td>.*?/ui/tokens/(\d+)/revoke", admin.get("/ui/tokens").text, re.S).group(1)
    assert admin.form(f"/ui/tokens/{token_id}/revoke").status_code == 303
    refused = api.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    assert "API token" in refused.json()["detail"]


def test_api_ignores_session_cookies(appliance: Appliance, admin: Client):
    # A signed-in browser cannot be driven into the API by another site: cookies do not authenticate it.
    assert admin.get("/api/v1/me").status_code == 401


def test_malformed_authorization_headers_get_401(appliance: Appliance):
    api = Client(appliance.url)
    for header in ("Bearer", "Basic abc", "Bearer pmr_nonexistent", "Bearer " + "x" * 5000):
        assert api.get("/api/v1/me", headers={"Authorization": header}).status_code == 401
