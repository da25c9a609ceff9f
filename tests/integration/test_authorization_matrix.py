"""Every route of the app against every kind of caller.

The matrix below must name every route the application registers: a new
route without an entry fails `test_matrix_covers_every_route`, so nobody adds
a page or endpoint without deciding who may use it.
"""

from __future__ import annotations

import re

import httpx
import pytest
from litestar.routes import HTTPRoute, WebSocketRoute
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from appliance.app import create_app
from appliance.config import load_settings
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Client

CALLERS = ("anon", "enrolled", "worker", "coordinator", "admin")
# Methods answered by the framework itself (CORS preflight, HEAD of static files), carrying no data.
AUTOMATIC_METHODS = {"OPTIONS", "HEAD"}


def everyone(status: int) -> dict[str, int]:
    return dict.fromkeys(CALLERS, status)


# Anonymous and enrolled-worker browsers are sent to the sign-in page; the API answers 401.
SIGNED_IN = {"anon": 303, "enrolled": 303, "worker": 200, "coordinator": 200, "admin": 200}
COORDINATORS = {"anon": 303, "enrolled": 303, "worker": 403, "coordinator": 200, "admin": 200}
ADMINS = {"anon": 303, "enrolled": 303, "worker": 403, "coordinator": 403, "admin": 200}


def only_admin(status: int) -> dict[str, int]:
    return {**ADMINS, "admin": status}


def only_coordinators(status: int) -> dict[str, int]:
    return {**COORDINATORS, "coordinator": status, "admin": status}


def users(status: int) -> dict[str, int]:
    """Any signed-in account gets ``status``; anonymous and enrolled browsers are sent to sign in."""
    return {**SIGNED_IN, "worker": status, "coordinator": status, "admin": status}


# The API answers 401 to callers without a token (an enrolled browser has only its cookie).
API_USERS = {**SIGNED_IN, "anon": 401, "enrolled": 401}


def api_users(status: int) -> dict[str, int]:
    return {**API_USERS, "worker": status, "coordinator": status, "admin": status}


def api_coordinators(status: int) -> dict[str, int]:
    return {**API_USERS, "worker": 403, "coordinator": status, "admin": status}


# (method, route path) -> (concrete path, form data, expected status per caller).
# "{...}" in a concrete path is filled from the fixtures below.
MATRIX: dict[tuple[str, str], tuple[str, dict, dict[str, int]]] = {
    ("GET", "/healthz"): ("/healthz", {}, everyone(200)),
    ("GET", "/health/live"): ("/health/live", {}, everyone(200)),
    ("GET", "/health/ready"): ("/health/ready", {}, everyone(200)),
    ("GET", "/health/leader"): ("/health/leader", {}, everyone(200)),
    # Served to loopback callers by default (tests/integration/test_metrics_access.py: tokens, allow-list).
    ("GET", "/metrics"): ("/metrics", {}, everyone(200)),
    ("GET", "/schema"): ("/schema", {}, everyone(200)),
    ("GET", "/schema/openapi.json"): ("/schema/openapi.json", {}, everyone(200)),
    ("GET", "/schema/{path:str}"): ("/schema/no-such-renderer", {}, everyone(404)),
    ("GET", "/static/{file_path:path}"): ("/static/css/app.css", {}, everyone(200)),
    # A static file that moved: its old URL redirects for everyone, as the file is served to everyone.
    ("GET", "/static/vendor/tfjs/tf-data-parallel.js"): ("/static/vendor/tfjs/tf-data-parallel.js", {}, everyone(301)),
    ("GET", "/"): ("/", {}, everyone(303)),
    ("GET", "/login"): ("/login", {}, {**everyone(303), "anon": 200, "enrolled": 200}),
    ("POST", "/login"): ("/login", {"email": "nobody@example.com", "password": "wrong-password"}, everyone(400)),
    # Single sign-on is not configured on this appliance: both steps are 404 for everyone
    # (tests/e2e/test_single_sign_on.py covers them against a real OpenID provider).
    ("GET", "/login/sso"): ("/login/sso", {}, everyone(404)),
    ("GET", "/login/sso/callback"): ("/login/sso/callback?code=x&state=y", {}, everyone(404)),
    ("POST", "/logout"): ("/logout", {}, everyone(303)),
    ("GET", "/api/v1/me"): ("/api/v1/me", {}, {**SIGNED_IN, "anon": 401, "enrolled": 401}),
    ("GET", "/ui"): ("/ui", {}, SIGNED_IN),
    ("GET", "/ui/jobs"): ("/ui/jobs", {}, COORDINATORS),
    ("GET", "/ui/runs"): ("/ui/runs", {}, COORDINATORS),
    # Jobs and Runs pages. A job or run that is not the caller's (here: none exists) is 404 for
    # everyone allowed in (tests/integration/test_jobs_dashboard.py covers other accounts' ones).
    ("GET", "/ui/jobs/new"): ("/ui/jobs/new", {}, COORDINATORS),
    ("POST", "/ui/jobs"): ("/ui/jobs", {"name": "", "script": ""}, only_coordinators(400)),
    ("GET", "/ui/jobs/{job_id:int}"): ("/ui/jobs/999999", {}, only_coordinators(404)),
    ("POST", "/ui/jobs/{job_id:int}"): ("/ui/jobs/999999", {"name": "x", "script": ""}, only_coordinators(404)),
    ("POST", "/ui/jobs/{job_id:int}/delete"): ("/ui/jobs/999999/delete", {}, only_coordinators(404)),
    ("GET", "/ui/jobs/{job_id:int}/run"): ("/ui/jobs/999999/run", {}, only_coordinators(404)),
    ("POST", "/ui/jobs/{job_id:int}/runs"): ("/ui/jobs/999999/runs", {"worker_count": "1"}, only_coordinators(404)),
    ("GET", "/ui/runs/table"): ("/ui/runs/table", {}, COORDINATORS),
    ("GET", "/ui/runs/{run_id:int}"): ("/ui/runs/999999", {}, only_coordinators(404)),
    ("GET", "/ui/runs/{run_id:int}/live"): ("/ui/runs/999999/live", {}, only_coordinators(404)),
    ("GET", "/ui/runs/{run_id:int}/logs"): ("/ui/runs/999999/logs", {}, only_coordinators(404)),
    ("GET", "/ui/runs/{run_id:int}/logs/download"): ("/ui/runs/999999/logs/download", {}, only_coordinators(404)),
    ("GET", "/ui/runs/{run_id:int}/output"): ("/ui/runs/999999/output", {}, only_coordinators(404)),
    ("GET", "/ui/runs/{run_id:int}/output.jsonl"): ("/ui/runs/999999/output.jsonl", {}, only_coordinators(404)),
    ("GET", "/ui/runs/{run_id:int}/output.csv"): ("/ui/runs/999999/output.csv", {}, only_coordinators(404)),
    ("GET", "/ui/runs/{run_id:int}/parameters/{group:str}/{key:path}"): (
        "/ui/runs/999999/parameters/A/w",
        {},
        only_coordinators(404),
    ),
    ("POST", "/ui/runs/{run_id:int}/cancel"): ("/ui/runs/999999/cancel", {}, only_coordinators(404)),
    ("GET", "/ui/storage"): ("/ui/storage", {}, COORDINATORS),
    ("GET", "/ui/billing"): ("/ui/billing", {}, COORDINATORS),
    ("GET", "/ui/workers"): ("/ui/workers", {}, SIGNED_IN),
    ("GET", "/ui/workers/live"): ("/ui/workers/live", {}, SIGNED_IN),
    # The runs a worker served: those of the caller's runs (none here), or every run for an admin.
    ("GET", "/ui/workers/{worker_id:str}/runs"): ("/ui/workers/no-such-worker/runs", {}, COORDINATORS),
    ("GET", "/ui/overview/live"): ("/ui/overview/live", {}, SIGNED_IN),
    ("GET", "/ui/jobs/{job_id:int}/capacity"): ("/ui/jobs/999999/capacity", {}, only_coordinators(404)),
    ("GET", "/ui/runs/{run_id:int}/stages/{group:str}/{stage:int}"): (
        "/ui/runs/999999/stages/A/0",
        {},
        only_coordinators(404),
    ),
    ("POST", "/ui/workers/{worker_id:str}/disconnect"): ("/ui/workers/no-such-worker/disconnect", {}, only_admin(303)),
    # WebSocket routes: 101 when the handshake is accepted, 403 when refused.
    ("WS", "/ws/worker"): (
        "/ws/worker",
        {},
        {**SIGNED_IN, "anon": 403, "enrolled": 101, "worker": 101, "coordinator": 101, "admin": 101},
    ),
    ("GET", "/ui/payments"): ("/ui/payments", {}, SIGNED_IN),
    ("GET", "/ui/account/password"): ("/ui/account/password", {}, SIGNED_IN),
    # An empty form is refused with 400 by the page itself, after authorization passed.
    ("POST", "/ui/account/password"): (
        "/ui/account/password",
        {},
        {**SIGNED_IN, "worker": 400, "coordinator": 400, "admin": 400},
    ),
    ("GET", "/ui/tokens"): ("/ui/tokens", {}, SIGNED_IN),
    ("POST", "/ui/tokens"): ("/ui/tokens", {"name": "matrix"}, SIGNED_IN),
    # The token belongs to the admin: anyone else is told there is no such token.
    ("POST", "/ui/tokens/{token_id:int}/revoke"): (
        "/ui/tokens/{admin_token_id}/revoke",
        {},
        {**SIGNED_IN, "worker": 404, "coordinator": 404, "admin": 303},
    ),
    ("GET", "/ui/admin"): ("/ui/admin", {}, only_admin(303)),
    ("GET", "/ui/admin/accounts"): ("/ui/admin/accounts", {}, ADMINS),
    ("POST", "/ui/admin/accounts"): ("/ui/admin/accounts", {"email": "not-an-email"}, only_admin(400)),
    ("POST", "/ui/admin/accounts/{user_id:int}/role"): (
        "/ui/admin/accounts/{victim_id}/role",
        {"role": "coordinator"},
        only_admin(303),
    ),
    ("POST", "/ui/admin/accounts/{user_id:int}/active"): (
        "/ui/admin/accounts/{victim_id}/active",
        {"active": "true"},
        only_admin(303),
    ),
    ("POST", "/ui/admin/accounts/{user_id:int}/reset-password"): (
        "/ui/admin/accounts/{victim_id}/reset-password",
        {},
        only_admin(200),
    ),
    # No such lockout: the admin is sent back to the accounts page with the message.
    ("POST", "/ui/admin/lockouts/clear"): (
        "/ui/admin/lockouts/clear",
        {"email": "nobody@example.com", "address": "192.0.2.1"},
        only_admin(303),
    ),
    ("GET", "/ui/admin/enrolment"): ("/ui/admin/enrolment", {}, ADMINS),
    ("POST", "/ui/admin/enrolment"): ("/ui/admin/enrolment", {"account_id": "x"}, only_admin(400)),
    ("POST", "/ui/admin/enrolment/{link_id:int}/revoke"): (
        "/ui/admin/enrolment/{spare_link_id}/revoke",
        {},
        only_admin(303),
    ),
    ("GET", "/enrol/{token:str}"): ("/enrol/{link_token}", {}, everyone(200)),
    ("POST", "/enrol/{token:str}"): ("/enrol/{link_token}", {}, everyone(303)),
    ("GET", "/worker"): ("/worker", {}, {**SIGNED_IN, "enrolled": 200}),
    # Blob endpoints for worker browsers: without a valid grant in the URL, refused.
    ("GET", "/pmrfs/blobs/{sha256:str}"): (
        "/pmrfs/blobs/" + "0" * 64,
        {},
        {**ADMINS, "enrolled": 403, "worker": 403, "coordinator": 403, "admin": 403},
    ),
    ("PUT", "/pmrfs/blobs/{sha256:str}"): (
        "/pmrfs/blobs/" + "0" * 64,
        {},
        {**ADMINS, "enrolled": 403, "worker": 403, "coordinator": 403, "admin": 403},
    ),
    ("GET", "/worker/start"): ("/worker/start", {}, everyone(200)),
    ("POST", "/worker/session"): ("/worker/session", {"json": {"token": "pmr_not-a-token"}}, everyone(401)),
    ("GET", "/worker/ice-servers"): ("/worker/ice-servers", {}, {**SIGNED_IN, "anon": 401, "enrolled": 200}),
    ("GET", "/ui/admin/turn"): ("/ui/admin/turn", {}, ADMINS),
    ("GET", "/ui/admin/turn/live"): ("/ui/admin/turn/live", {}, ADMINS),
    ("GET", "/ui/admin/settings"): ("/ui/admin/settings", {}, ADMINS),
    ("POST", "/ui/admin/settings"): ("/ui/admin/settings", {"allowed": "", "denied": ""}, only_admin(303)),
    ("POST", "/ui/admin/settings/fetch-origins"): (
        "/ui/admin/settings/fetch-origins",
        {"origins": ""},
        only_admin(303),
    ),
    ("POST", "/ui/admin/settings/scheduling"): ("/ui/admin/settings/scheduling", {}, only_admin(303)),
    ("POST", "/ui/admin/settings/software-gpus"): ("/ui/admin/settings/software-gpus", {}, only_admin(303)),
    ("POST", "/ui/admin/settings/courtesy"): (
        "/ui/admin/settings/courtesy",
        {"core_share_percent": "50"},
        only_admin(303),
    ),
    ("POST", "/ui/admin/settings/metrics"): (
        "/ui/admin/settings/metrics",
        {"sources": "127.0.0.0/8, ::1"},
        only_admin(303),
    ),
    # A new metrics token is shown once, on the page itself.
    ("POST", "/ui/admin/settings/metrics/token"): ("/ui/admin/settings/metrics/token", {}, only_admin(200)),
    # PMRFS. Bucket and object routes check ownership after the role: an unknown bucket is 404
    # for everyone allowed in (tests/integration/test_pmrfs_api.py covers other accounts' buckets).
    ("PUT", "/api/v1/buckets/{bucket:str}"): (
        "/api/v1/buckets/Not_A_Bucket",
        {},
        {**API_USERS, "worker": 403, "coordinator": 400, "admin": 400},
    ),
    ("GET", "/api/v1/buckets"): ("/api/v1/buckets", {}, API_USERS),
    ("DELETE", "/api/v1/buckets/{bucket:str}"): ("/api/v1/buckets/no-such-bucket", {}, api_users(404)),
    ("GET", "/api/v1/buckets/{bucket:str}/objects"): ("/api/v1/buckets/no-such-bucket/objects", {}, api_users(404)),
    ("PUT", "/api/v1/buckets/{bucket:str}/objects/{key:path}"): (
        "/api/v1/buckets/no-such-bucket/objects/a/b.txt",
        {},
        api_users(404),
    ),
    ("GET", "/api/v1/buckets/{bucket:str}/objects/{key:path}"): (
        "/api/v1/buckets/no-such-bucket/objects/a/b.txt",
        {},
        api_users(404),
    ),
    ("DELETE", "/api/v1/buckets/{bucket:str}/objects/{key:path}"): (
        "/api/v1/buckets/no-such-bucket/objects/a/b.txt",
        {},
        api_users(404),
    ),
    ("GET", "/api/v1/objects-status/{bucket:str}/{key:path}"): (
        "/api/v1/objects-status/no-such-bucket/a/b.txt",
        {},
        api_users(404),
    ),
    ("GET", "/ui/storage/buckets/{bucket:str}"): ("/ui/storage/buckets/no-such-bucket", {}, only_coordinators(404)),
    ("POST", "/ui/storage/buckets"): ("/ui/storage/buckets", {"name": "Not_A_Bucket"}, only_coordinators(400)),
    ("POST", "/ui/storage/buckets/{bucket:str}/delete"): (
        "/ui/storage/buckets/no-such-bucket/delete",
        {"force": "true"},
        only_coordinators(404),
    ),
    ("POST", "/ui/storage/buckets/{bucket:str}/upload"): (
        "/ui/storage/buckets/no-such-bucket/upload",
        {"key": "a.txt"},
        only_coordinators(404),
    ),
    ("POST", "/ui/storage/buckets/{bucket:str}/objects/delete"): (
        "/ui/storage/buckets/no-such-bucket/objects/delete",
        {"key": "a.txt"},
        only_coordinators(404),
    ),
    ("POST", "/ui/storage/buckets/{bucket:str}/objects/pin"): (
        "/ui/storage/buckets/no-such-bucket/objects/pin",
        {"key": "a.txt", "pinned": "true"},
        only_coordinators(404),
    ),
    ("GET", "/ui/storage/object/{bucket:str}/{key:path}"): (
        "/ui/storage/object/no-such-bucket/a/b.txt",
        {},
        only_coordinators(404),
    ),
    ("GET", "/ui/storage/download/{bucket:str}/{key:path}"): (
        "/ui/storage/download/no-such-bucket/a/b.txt",
        {},
        only_coordinators(404),
    ),
    # Jobs and runs in the API: coordinators' own (an unknown id is 404 for everyone allowed in).
    ("POST", "/api/v1/jobs"): (
        "/api/v1/jobs",
        {"json": {"name": "x", "script": "syntax error ("}},
        api_coordinators(400),
    ),
    ("GET", "/api/v1/jobs"): ("/api/v1/jobs", {}, api_coordinators(200)),
    ("GET", "/api/v1/jobs/{job_id:int}"): ("/api/v1/jobs/999999", {}, api_coordinators(404)),
    ("PUT", "/api/v1/jobs/{job_id:int}"): ("/api/v1/jobs/999999", {}, api_coordinators(400)),
    ("DELETE", "/api/v1/jobs/{job_id:int}"): ("/api/v1/jobs/999999", {}, api_coordinators(404)),
    ("POST", "/api/v1/jobs/{job_id:int}/runs"): ("/api/v1/jobs/999999/runs", {"json": {}}, api_coordinators(404)),
    ("POST", "/api/v1/jobs/{job_id:int}/capacity"): (
        "/api/v1/jobs/999999/capacity",
        {"json": {}},
        api_coordinators(404),
    ),
    ("GET", "/api/v1/runs"): ("/api/v1/runs", {}, api_coordinators(200)),
    ("GET", "/api/v1/runs/{run_id:int}"): ("/api/v1/runs/999999", {}, api_coordinators(404)),
    ("POST", "/api/v1/runs/{run_id:int}/cancel"): ("/api/v1/runs/999999/cancel", {"json": {}}, api_coordinators(404)),
    ("GET", "/api/v1/runs/{run_id:int}/output"): ("/api/v1/runs/999999/output", {}, api_coordinators(404)),
    ("GET", "/api/v1/runs/{run_id:int}/logs"): ("/api/v1/runs/999999/logs", {}, api_coordinators(404)),
    ("GET", "/api/v1/runs/{run_id:int}/parameters"): ("/api/v1/runs/999999/parameters", {}, api_coordinators(404)),
    ("GET", "/api/v1/runs/{run_id:int}/parameters/{group:str}/{key:path}"): (
        "/api/v1/runs/999999/parameters/A/w",
        {},
        api_coordinators(404),
    ),
    # A run's sandbox script: only for browsers of an account holding one of its ranks while it runs.
    ("GET", "/worker/runs/{run_id:int}/sandbox.js"): (
        "/worker/runs/999999/sandbox.js",
        {},
        {**SIGNED_IN, "enrolled": 404, "worker": 404, "coordinator": 404, "admin": 404},
    ),
    # The warm task sandbox: any worker browser or signed-in account, under the current allow-list only
    # (tests/integration/test_warm_sandbox.py serves it).
    ("GET", "/worker/sandbox.js"): (
        "/worker/sandbox.js?origins=0",
        {},
        {**SIGNED_IN, "enrolled": 404, "worker": 404, "coordinator": 404, "admin": 404},
    ),
    # The sandbox frame: loaded without credentials, so public; a policy of anything but origins is refused.
    ("GET", "/worker/sandbox.html"): (
        "/worker/sandbox.html?connect=https://a.example;script-src%20*",
        {},
        everyone(400),
    ),
    # Cloud Data: each coordinator's own bucket settings. A refused form is 400; the test, CORS and
    # remove actions go back to the page (there is nothing saved to act on here).
    ("GET", "/ui/cloud"): ("/ui/cloud", {}, COORDINATORS),
    ("POST", "/ui/cloud"): ("/ui/cloud", {"bucket": "Not_A_Bucket"}, only_coordinators(400)),
    ("POST", "/ui/cloud/test"): ("/ui/cloud/test", {}, only_coordinators(303)),
    ("POST", "/ui/cloud/cors"): ("/ui/cloud/cors", {}, only_coordinators(303)),
    ("POST", "/ui/cloud/remove"): ("/ui/cloud/remove", {}, only_coordinators(303)),
    # Stripe's webhook: public, trusted only by its signature (tests/integration/test_billing_cli_webhook.py);
    # this appliance has no webhook secret, so it answers 503 to everyone and reads nothing.
    ("POST", "/billing/stripe/webhook"): ("/billing/stripe/webhook", {}, everyone(503)),
    # Billing pages (billing/ui_routes.py; tests/integration/test_billing_pages.py covers them with data).
    # A statement that is not the caller's (here: none exists) is 404 for everyone allowed in.
    ("GET", "/ui/statements/{statement_id:int}"): ("/ui/statements/999999", {}, users(404)),
    ("GET", "/ui/statements/{statement_id:int}/statement.html"): (
        "/ui/statements/999999/statement.html",
        {},
        users(404),
    ),
    ("GET", "/ui/statements/{statement_id:int}/statement.csv"): (
        "/ui/statements/999999/statement.csv",
        {},
        users(404),
    ),
    # Stripe is not configured here: onboarding sends everyone back to Payments, which says so.
    ("POST", "/ui/payments/onboard"): ("/ui/payments/onboard", {}, users(303)),
    ("GET", "/ui/payments/onboarding/return"): ("/ui/payments/onboarding/return", {}, users(303)),
    ("GET", "/ui/payments/onboarding/refresh"): (
        "/ui/payments/onboarding/refresh",
        {},
        users(303),
    ),
    ("GET", "/ui/admin/billing"): ("/ui/admin/billing", {}, ADMINS),
    ("POST", "/ui/admin/billing/prices"): ("/ui/admin/billing/prices", {"resource": "cpu_ms"}, only_admin(400)),
    ("POST", "/ui/admin/billing/invoices/{invoice_id:int}/retry"): (
        "/ui/admin/billing/invoices/999999/retry",
        {},
        only_admin(303),
    ),
    ("POST", "/ui/admin/billing/payouts/{payout_id:int}/retry"): (
        "/ui/admin/billing/payouts/999999/retry",
        {},
        only_admin(303),
    ),
    ("GET", "/ui/admin/billing/statements.csv"): ("/ui/admin/billing/statements.csv", {}, ADMINS),
    # The audit log (tests/integration/test_audit_log.py checks what it records).
    ("GET", "/ui/admin/audit"): ("/ui/admin/audit", {}, ADMINS),
    ("GET", "/ui/admin/audit.csv"): ("/ui/admin/audit.csv", {}, ADMINS),
    ("POST", "/ui/admin/audit/retention"): ("/ui/admin/audit/retention", {"retention_days": "3650"}, only_admin(303)),
}


def app_routes(tmp_path) -> set[tuple[str, str]]:
    app = create_app(load_settings({"data_dir": str(tmp_path / "routes")}))
    http = {
        (method, route.path)
        for route in app.routes
        if isinstance(route, HTTPRoute)
        for handler in route.route_handlers
        for method in handler.http_methods
        if method not in AUTOMATIC_METHODS
    }
    return http | {("WS", route.path) for route in app.routes if isinstance(route, WebSocketRoute)}


def test_matrix_covers_every_route(tmp_path):
    routes = app_routes(tmp_path)
    missing = sorted(routes - MATRIX.keys())
    stale = sorted(MATRIX.keys() - routes)
    assert not missing, f"routes without an entry in the authorization matrix: {missing}"
    assert not stale, f"matrix entries for routes that no longer exist: {stale}"


@pytest.fixture(scope="module")
def callers(appliance):
    """A client per kind of caller, the API token of each, and objects to act on."""
    password = "matrix-password-123"
    for role in ("worker", "coordinator"):
        appliance.add_user(f"{role}@example.com", role, password)
    appliance.add_user("victim@example.com", "worker", password)

    admin = Client(appliance.url)
    admin.login(ADMIN_EMAIL, ADMIN_PASSWORD)
    page = admin.get("/ui/admin/accounts").text
    victim_id = re.search(r'id="account-(\d+)" data-email="victim@example.com"', page).group(1)
    worker_id = re.search(r'id="account-(\d+)" data-email="worker@example.com"', page).group(1)

    def new_link() -> tuple[str, str]:
        page = admin.form("/ui/admin/enrolment", {"account_id": worker_id, "label": "matrix", "valid_hours": "24"}).text
        token = re.search(r'id="new-link">[^<]*/enrol/([^<]+)<', page).group(1)
        link_id = max(int(i) for i in re.findall(r'id="link-(\d+)"', page))
        return token, str(link_id)

    link_token, _ = new_link()
    _, spare_link_id = new_link()
    admin.form("/ui/tokens", {"name": "revoke me"})
    admin_token_id = re.search(r'action="/ui/tokens/(\d+)/revoke"', admin.get("/ui/tokens").text).group(1)

    clients = {"anon": Client(appliance.url), "admin": admin}
    tokens = {}
    for role in ("worker", "coordinator"):
        clients[role] = Client(appliance.url)
        clients[role].login(f"{role}@example.com", password)
    for role in ("worker", "coordinator", "admin"):
        tokens[role] = appliance.cli(
            "token", "create", f"{role}@example.com" if role != "admin" else ADMIN_EMAIL
        ).stdout.strip()
    enrolled = Client(appliance.url)
    assert enrolled.form(f"/enrol/{link_token}").status_code == 303
    clients["enrolled"] = enrolled
    values = {
        "victim_id": victim_id,
        "link_token": link_token,
        "spare_link_id": spare_link_id,
        "admin_token_id": admin_token_id,
    }
    yield clients, tokens, values
    for client in clients.values():
        client.close()


OWN_CREDENTIAL_CHANGES = {("POST", "/logout"), ("POST", "/enrol/{token:str}")}
CASES = sorted((method, route, caller) for (method, route) in MATRIX for caller in CALLERS)


@pytest.mark.parametrize("method,route,caller", CASES)
def test_route_authorization(appliance, callers, method, route, caller):
    perform(appliance, callers, method, route, caller)


def perform(appliance, callers, method: str, route: str, caller: str) -> httpx.Response | None:
    """Call the route as the caller and check the status it gets; the response (None for a WebSocket)."""
    clients, tokens, values = callers
    path_template, data, expected = MATRIX[(method, route)]
    path = path_template.format(**values)
    client = clients[caller]
    if (method, route) in OWN_CREDENTIAL_CHANGES:
        # Signing out or enrolling changes the caller's own cookies: use a fresh caller of the same kind.
        client = Client(appliance.url)
        if caller == "anon":
            pass
        elif caller == "enrolled":
            client.form(f"/enrol/{values['link_token']}")
        else:
            email = ADMIN_EMAIL if caller == "admin" else f"{caller}@example.com"
            client.login(email, ADMIN_PASSWORD if caller == "admin" else "matrix-password-123")
    headers = {}
    if path.startswith("/api/") and caller in tokens:
        headers["Authorization"] = f"Bearer {tokens[caller]}"
    if method == "WS":
        assert websocket_status(appliance.url + path, client) == expected[caller], f"WS {path} as {caller}"
        return None
    if method == "GET":
        response = client.get(path, headers=headers)
    elif method in ("PUT", "DELETE"):
        response = client.request(method, path, headers=headers)
    elif method == "PUT":
        response = client.put(path, content=b"x", headers=headers)
    elif "json" in data:
        response = client.post(path, json=data["json"], headers={**headers, "x-csrftoken": client.csrf()})
    else:
        response = client.form(path, data, headers=headers)
    assert response.status_code == expected[caller], (
        f"{method} {path} as {caller}: expected {expected[caller]}, got {response.status_code}: {response.text[:300]}"
    )
    if response.status_code == 303 and caller in ("anon", "enrolled") and expected is not everyone(303):
        location = response.headers["location"]
        assert location.startswith("/login") or route in ("/", "/logout", "/enrol/{token:str}", "/login"), location
    return response


def websocket_status(url: str, client: Client) -> int:
    """101 if the WebSocket handshake (with the client's cookies, from our own origin) is accepted, else the status."""
    cookie = "; ".join(f"{name}={value}" for name, value in client.cookies.items())
    origin = url.split("/ws/")[0]
    try:
        with connect(
            url.replace("http", "ws", 1), additional_headers={"Cookie": cookie}, origin=origin, open_timeout=10
        ):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code
