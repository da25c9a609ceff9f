"""What a misconfigured identity provider gets: a message that names what to fix.

The happy path and the wrong client secret run against a real OpenID provider in
tests/e2e/test_single_sign_on.py. A real provider never sends a discovery document for another
issuer or an ID token for another audience, so here a small HTTP server plays a provider that
does: it serves the discovery document and keys the test sets, and the test signs the ID tokens
(RS256, with joserfc) that the appliance's client then checks.
"""

from __future__ import annotations

import html
import json
import re
import threading
import time
from http.server import ThreadingHTTPServer

import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

from appliance.accounts.sso import OidcClient, PendingSigner, ProviderError, SignInRefused
from appliance.config import load_settings
from appliance.errors import InvalidRequest
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, QuietHandler, free_port

CLIENT_ID = "peermr"
KEY = RSAKey.generate_key(2048, parameters={"kid": "good"})
OTHER_KEY = RSAKey.generate_key(2048, parameters={"kid": "good"})


class FakeProvider(ThreadingHTTPServer):
    """Serves ``documents`` (path -> JSON value or raw bytes) and 404 for anything else."""

    def __init__(self):
        self.documents: dict[str, object] = {}

        class Handler(QuietHandler):
            def do_GET(handler):  # noqa: N805
                body = self.documents.get(handler.path.split("?")[0])
                if body is None:
                    handler.reply(404, b"not found")
                elif isinstance(body, bytes):
                    handler.reply(200, body, "text/html")
                else:
                    handler.reply(200, json.dumps(body).encode(), "application/json")

        super().__init__(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server_address[1]}"
        self.good()

    def good(self) -> None:
        self.documents = {
            "/.well-known/openid-configuration": {
                "issuer": self.issuer,
                "authorization_endpoint": self.issuer + "/auth",
                "token_endpoint": self.issuer + "/token",
                "jwks_uri": self.issuer + "/jwks",
            },
            "/jwks": KeySet([KEY]).as_dict(private=False),
        }


@pytest.fixture(scope="module")
def provider():
    server = FakeProvider()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def client_for(provider: FakeProvider, **settings) -> OidcClient:
    options = {
        "sso_issuer": provider.issuer,
        "sso_client_id": CLIENT_ID,
        "sso_client_secret": "secret",
        "sso_allowed_domains": "corp.example",
        "sso_role_groups": "admins=admin, scientists=coordinator",
        **settings,
    }
    return OidcClient(load_settings(options, environ={}), b"signing key of the tests")


def id_token(provider: FakeProvider, key: RSAKey = KEY, **claims) -> str:
    now = int(time.time())
    body = {"iss": provider.issuer, "aud": CLIENT_ID, "sub": "u1", "iat": now, "exp": now + 300, "nonce": "n1"}
    return jwt.encode({"alg": "RS256", "kid": "good"}, {**body, **claims}, key)


async def provider_error(call) -> str:
    with pytest.raises(ProviderError) as refused:
        await call
    assert refused.value.status == 502
    return str(refused.value)


# -- discovery ----------------------------------------------------------------------------------


async def test_an_unreachable_issuer_says_so_and_names_the_setting():
    closed = f"http://127.0.0.1:{free_port()}"
    message = await provider_error(client_for_issuer(closed).metadata())
    assert "cannot be reached" in message and f"{closed}/.well-known/openid-configuration" in message
    assert "Check sso_issuer" in message


def client_for_issuer(issuer: str) -> OidcClient:
    settings = load_settings(
        {"sso_issuer": issuer, "sso_client_id": CLIENT_ID, "sso_client_secret": "secret"}, environ={}
    )
    return OidcClient(settings, b"key")


@pytest.mark.parametrize(
    "document,expected",
    [
        (None, "answered HTTP 404 for its discovery document"),
        (b"<html>Welcome to nginx</html>", "is not a JSON object"),
        ({"issuer": "http://elsewhere.example"}, "names the issuer 'http://elsewhere.example', not the configured"),
        ("without jwks_uri", "lacks jwks_uri"),
    ],
)
async def test_a_bad_discovery_document_is_named(provider, document, expected):
    provider.good()
    path = "/.well-known/openid-configuration"
    if document == "without jwks_uri":
        provider.documents[path] = {k: v for k, v in provider.documents[path].items() if k != "jwks_uri"}
    elif document is None:
        del provider.documents[path]
    else:
        provider.documents[path] = document
    try:
        assert expected in await provider_error(client_for(provider).metadata())
    finally:
        provider.good()


# -- the ID token ---------------------------------------------------------------------------------


async def test_a_good_id_token_gives_its_claims(provider):
    claims = await client_for(provider).verify_id_token(id_token(provider, email="ada@corp.example"), "n1")
    assert claims["sub"] == "u1" and claims["email"] == "ada@corp.example"


@pytest.mark.parametrize(
    "claims,key,expected",
    [
        ({"iss": "http://elsewhere.example"}, KEY, "issued by 'http://elsewhere.example', not by the configured"),
        ({"aud": "another-client"}, KEY, "meant for 'another-client', not for this appliance's sso_client_id"),
        ({"aud": [CLIENT_ID, "another-client"], "azp": "another-client"}, KEY, "not for this appliance's"),
        ({"nonce": "replayed"}, KEY, "does not answer this sign-in (its nonce differs)"),
        ({"exp": int(time.time()) - 3600}, KEY, "has expired"),
        ({}, OTHER_KEY, "signature does not verify against the provider's keys"),
    ],
)
async def test_an_id_token_that_does_not_check_out_is_refused_with_the_reason(provider, claims, key, expected):
    token = id_token(provider, key, **claims)
    assert expected in await provider_error(client_for(provider).verify_id_token(token, "n1"))


# -- whom the settings admit ----------------------------------------------------------------------


def test_the_settings_decide_who_is_admitted_and_with_which_role(provider):
    client = client_for(provider, sso_default_role="")
    ada = client.admit({"sub": "1", "email": "Ada@Corp.Example", "groups": ["staff", "scientists", "admins"]})
    assert (ada.email, ada.role) == ("ada@corp.example", "admin")
    assert client.admit({"sub": "2", "email": "dan@corp.example", "groups": "scientists"}).role == "coordinator"
    for claims, message in (
        ({"sub": "3", "email": "eve@elsewhere.example", "groups": ["admins"]}, "Accounts at elsewhere.example"),
        ({"sub": "4", "groups": ["admins"]}, "sent no email address"),
        ({"sub": "5", "email": "x@corp.example", "email_verified": False, "groups": ["admins"]}, "not verified"),
        ({"sub": "6", "email": "wes@corp.example", "groups": ["staff"]}, "none of the groups"),
    ):
        with pytest.raises(SignInRefused, match=message):
            client.admit(claims)
    # Without a group mapping the appliance keeps roles; first sign-ins get the default role.
    plain = client_for(provider, sso_role_groups="", sso_default_role="worker")
    wes = plain.admit({"sub": "6", "email": "wes@corp.example"})
    assert (wes.role, wes.new_account_role) == (None, "worker")


async def test_a_callback_not_started_in_this_browser_is_refused(provider):
    client = client_for(provider)
    _, cookie = await client.begin("/worker")
    state = PendingSigner(b"signing key of the tests").load(cookie).state
    for params, carried in (
        ({"state": "forged", "code": "c"}, cookie),  # another state than the one this browser left with
        ({"state": state, "code": "c"}, None),  # no cookie: started in another browser
        ({"state": state, "code": "c"}, cookie[:-2] + "00"),  # a tampered cookie
    ):
        with pytest.raises(InvalidRequest, match="not started in this browser"):
            await client.finish(params, carried)


async def test_an_error_answer_says_whether_the_person_or_the_setup_is_the_cause(provider):
    client = client_for(provider)
    _, cookie = await client.begin("")
    state = PendingSigner(b"signing key of the tests").load(cookie).state
    cancelled = {"state": state, "error": "access_denied", "error_description": "End-User aborted interaction"}
    with pytest.raises(SignInRefused, match=r"not completed at the identity provider \(access_denied: End-User"):
        await client.finish(cancelled, cookie)
    setup = {"state": state, "error": "invalid_scope", "error_description": "groups is not allowed"}
    assert "Check sso_scopes" in await provider_error(client.finish(setup, cookie))


async def test_the_authorization_request_carries_pkce_state_and_nonce(provider):
    url, cookie = await client_for(provider).begin("")
    pending = PendingSigner(b"signing key of the tests").load(cookie)
    assert url.startswith(provider.issuer + "/auth?")
    assert f"state={pending.state}" in url and f"nonce={pending.nonce}" in url
    assert "code_challenge_method=S256" in url and re.search(r"code_challenge=[\w-]{43}", url)
    assert pending.verifier not in url


# -- through the appliance ------------------------------------------------------------------------


BREAK_GLASS = "keeper@example.com"


@pytest.fixture(scope="module")
def unreachable(appliance_with):
    """An appliance whose provider cannot be reached, with password sign-in off but for keeper@example.com."""
    return appliance_with(
        sso_issuer=f"http://127.0.0.1:{free_port()}",
        sso_client_id=CLIENT_ID,
        sso_client_secret="secret",
        password_login=False,
        break_glass_email=BREAK_GLASS,
    )


def refusals(appliance: Appliance) -> list[tuple[str, dict]]:
    """Failed sign-ins in the audit log: who, and what it says of them."""
    rows = appliance.query("SELECT actor, after FROM audit_entry WHERE action = 'sign-in.failed' ORDER BY id")
    return [(actor, json.loads(after)) for actor, after in rows]


def test_the_sign_in_page_shows_a_provider_error_and_still_offers_the_break_glass_form(unreachable):
    response = unreachable.client().get("/login/sso?next=/worker")
    assert response.status_code == 502
    error = re.search(r'id="login-error">([^<]+)<', response.text).group(1)
    assert "The identity provider cannot be reached" in error and "Check sso_issuer" in error
    assert 'id="password-sign-in"' in response.text and 'name="next" value="/worker"' in response.text
    # The audit log has the failed attempt, from someone not yet known, with the reason they were shown.
    actor, after = refusals(unreachable)[-1]
    assert actor == "anonymous" and after["method"] == "sso"
    assert after["reason"].startswith("The identity provider cannot be reached")


def test_the_break_glass_password_works_only_while_its_account_is_an_admin(unreachable):
    unreachable.add_user(BREAK_GLASS, "admin", "keeper-password-1")
    keeper = unreachable.client()
    assert keeper.login(BREAK_GLASS, "keeper-password-1").status_code == 303
    # Any other password is refused, the first admin's too.
    refused = unreachable.client().form("/login", {"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD})
    assert refused.status_code == 403 and "Password sign-in is turned off here" in refused.text

    # Once the break-glass account is no longer an admin (here it demotes itself), its password is refused too.
    page = keeper.get("/ui/admin/accounts").text
    account_id = re.search(rf'id="account-(\d+)" data-email="{BREAK_GLASS}"', page).group(1)
    assert keeper.form(f"/ui/admin/accounts/{account_id}/role", {"role": "coordinator"}).status_code == 303
    demoted = unreachable.client().form("/login", {"email": BREAK_GLASS, "password": "keeper-password-1"})
    assert demoted.status_code == 403
    assert f"{BREAK_GLASS} may use its password only while it is an admin" in html.unescape(demoted.text)
    assert "peermr_session" not in demoted.cookies

    assert [(actor, after["reason"].split(":")[0]) for actor, after in refusals(unreachable)[-2:]] == [
        (ADMIN_EMAIL, "Password sign-in is turned off here"),
        (BREAK_GLASS, "Password sign-in is turned off here"),
    ]
    assert "only while it is an admin" in refusals(unreachable)[-1][1]["reason"]
    signed_in = unreachable.query(f"SELECT after FROM audit_entry WHERE action = 'sign-in' AND actor = '{BREAK_GLASS}'")
    assert [json.loads(after) for (after,) in signed_in] == [{"method": "password"}]
