"""Health, metrics, OpenAPI, and the error pages people see."""

from __future__ import annotations

import re

from litestar import get
from litestar.testing import TestClient

from appliance.accounts.auth import PUBLIC, access
from appliance.app import create_app
from appliance.config import load_settings
from tests.support import Appliance, Client, postgres_database_url


def test_healthz_and_metrics(appliance: Appliance):
    client = appliance.client()
    health = client.get("/healthz")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    client.get("/login")
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    assert re.search(r'peermr_http_requests_total\{method="GET",status="200"\} \d+', metrics.text)
    assert re.search(r'peermr_accounts\{role="admin"\} 1\.0', metrics.text)
    assert 'peermr_build_info{version="' in metrics.text


def test_openapi_schema_lists_the_api(appliance: Appliance):
    schema = appliance.client().get("/schema").json()
    assert schema["info"]["title"] == "PeerMR Appliance API"
    assert "/api/v1/me" in schema["paths"]
    assert not any(path.startswith("/ui") for path in schema["paths"])


def test_404_page_for_people_and_json_for_the_api(appliance: Appliance, admin: Client):
    page = admin.get("/ui/nowhere")
    assert page.status_code == 404 and "Page not found" in page.text and "text/html" in page.headers["content-type"]
    api = appliance.client().get("/api/v1/nowhere")
    assert api.status_code == 404 and api.json()["status_code"] == 404


def test_500_page_hides_the_details(tmp_path):
    @get("/boom", opt=access(PUBLIC), include_in_schema=False)
    async def boom() -> str:
        raise RuntimeError("secret internal detail")

    data = tmp_path / "data"
    app = create_app(load_settings({"data_dir": str(data), "database_url": postgres_database_url(data)}))
    app.register(boom)
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/boom")
    assert response.status_code == 500
    assert "Something went wrong" in response.text
    assert "secret internal detail" not in response.text


def test_unannotated_route_fails_closed(tmp_path):
    @get("/forgotten", include_in_schema=False)
    async def forgotten() -> str:
        return "should not be served"

    data = tmp_path / "data"
    app = create_app(load_settings({"data_dir": str(data), "database_url": postgres_database_url(data)}))
    app.register(forgotten)
    with TestClient(app) as client:
        response = client.get("/forgotten")
    assert response.status_code == 403 and "should not be served" not in response.text


def test_static_files_and_vendored_htmx(appliance: Appliance):
    client = appliance.client()
    css = client.get("/static/css/app.css")
    assert css.status_code == 200 and "text/css" in css.headers["content-type"]
    htmx = client.get("/static/vendor/htmx/htmx.min.js")
    assert htmx.status_code == 200 and "htmx" in htmx.text
    assert client.get("/static/vendor/htmx/LICENSE").status_code == 200
    assert client.get("/static/../appliance/config.py").status_code == 404


def test_security_headers_on_pages(appliance: Appliance, admin: Client):
    response = appliance.client().get("/login")
    csp = response.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
    assert "unsafe-eval" not in csp  # only a task's Web Worker may evaluate strings
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["referrer-policy"] == "same-origin"
    assert response.headers["x-content-type-options"] == "nosniff"
    # Signed-in pages too: a run's page (its run waits for workers), the worker page and others.
    script = (
        "const execution = new JobExecution('pmrfs');\n"
        "execution.setInputFn(async function input() { return [1]; });\n"
        "execution.addStage(new MapStage(async function map(x) { await context.onComplete(); }));\n"
        "execution.start(jobRunner);\n"
    )
    job = admin.form("/ui/jobs", {"name": "csp", "script": script})
    assert job.status_code == 303, job.text[:2000]
    run = admin.form(f"{job.headers['location']}/runs", {"worker_count": "1", "group_count": "1"})
    assert run.status_code == 303 and re.fullmatch(r"/ui/runs/\d+", run.headers["location"]), run.text[:2000]
    for path in (run.headers["location"], "/worker", "/ui/jobs", "/ui/admin/settings"):
        page = admin.get(path)
        assert page.status_code == 200, (path, page.status_code)
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-eval" not in csp, (path, csp)
