"""What IT's supervisors and log shippers see: the health probes, the start's log lines (text or JSON),
and the TLS settings refused before a start."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from appliance.config import ConfigError, load_settings
from tests.support import run_cli


def test_ready_says_why_while_the_database_fails_and_live_stays_up(appliance_with):
    server = appliance_with()
    client = httpx.Client(base_url=server.url, timeout=30)
    for path in ("/health/live", "/health/ready", "/healthz"):
        assert client.get(path).status_code == 200, path
    schema = client.get("/schema").json()["paths"]
    assert not any(path.startswith(("/health", "/healthz")) for path in schema)

    server.query("ALTER TABLE accounts_user RENAME TO accounts_user_away")
    try:
        ready = client.get("/health/ready")
        assert ready.status_code == 503
        assert ready.json()["status"] == "unavailable"
        assert "the database failed a query" in ready.json()["detail"] and "accounts_user" in ready.json()["detail"]
        assert client.get("/healthz").status_code == 503
        assert client.get("/health/live").status_code == 200  # a restart would not mend the database
    finally:
        server.query("ALTER TABLE accounts_user_away RENAME TO accounts_user")
    assert client.get("/health/ready").status_code == 200


def start_lines(log: str) -> list[str]:
    """The log up to the line saying the appliance serves, and that line."""
    lines = log.splitlines()
    serving = next(i for i, line in enumerate(lines) if "serving: open" in line)
    return lines[: serving + 1]


def test_a_start_logs_a_line_per_step_and_signs_in_where_it_serves(appliance_with):
    lines = start_lines(appliance_with().log())
    info = [line for line in lines if " INFO " in line]
    assert 3 <= len(info) <= 6, "\n".join(lines)
    assert not [line for line in lines if "apscheduler" in line or "uvicorn" in line.lower()], "\n".join(lines)
    sign_in = re.search(r"Sign in at (\S+)/login", "\n".join(lines))
    serving = re.search(r"serving: open (\S+)/", lines[-1])
    assert sign_in and serving and sign_in[1] == serving[1], "\n".join(lines)


def test_json_logs_are_one_object_a_line(appliance_with):
    server = appliance_with(log_format="json")
    httpx.get(server.url + "/nowhere")
    server.stop()
    entries = [json.loads(line) for line in server.log().splitlines()]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= set(entry) for entry in entries)
    messages = [entry["message"] for entry in entries]
    assert any(m.startswith("serving: open http://127.0.0.1:") for m in messages), messages
    assert any("Sign in at http://127.0.0.1:" in m for m in messages), messages
    assert messages[-1] == "stopped"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", entries[0]["time"])


def test_listening_on_every_address_names_localhost_for_this_machine(tmp_path):
    settings = load_settings({"data_dir": str(tmp_path), "host": "0.0.0.0", "port": 8443})
    assert settings.local_url == "http://localhost:8443"
    assert settings.base_url.startswith("http://") and settings.base_url.endswith(":8443")
    (tmp_path / "cert.pem").write_text("")
    (tmp_path / "key.pem").write_text("")
    tls = load_settings(
        {},
        {
            "PEERMR_DATA_DIR": str(tmp_path),
            "PEERMR_TLS_CERT": str(tmp_path / "cert.pem"),
            "PEERMR_TLS_KEY": str(tmp_path / "key.pem"),
            "PEERMR_HOST": "::",
        },
    )
    assert tls.local_url == "https://localhost:8000" and tls.secure_cookies


def test_tls_settings_are_checked_before_a_start(tmp_path):
    cert = tmp_path / "cert.pem"
    cert.write_text("")
    alone = run_cli("serve", "--data-dir", str(tmp_path / "data"), "--tls-cert", str(cert))
    assert alone.returncode == 1
    assert "tls_cert and tls_key go together" in alone.stderr
    missing = run_cli(
        "serve", "--data-dir", str(tmp_path / "data"), "--tls-cert", str(cert), "--tls-key", "/nowhere.pem"
    )
    assert missing.returncode == 1 and "tls_key: no file /nowhere.pem" in missing.stderr
    with pytest.raises(ConfigError, match="log_format must be one of text, json, got 'xml'"):
        load_settings({"data_dir": str(tmp_path)}, {"PEERMR_LOG_FORMAT": "xml"})
