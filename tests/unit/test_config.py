"""Settings precedence and validation; secrets kept private."""

from __future__ import annotations

import stat

import pytest

from appliance.accounts.forms import safe_next
from appliance.config import ConfigError, load_settings
from appliance.secret_keys import load_or_create_secrets


def test_defaults_work_without_any_configuration(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = load_settings({}, environ={})
    assert (settings.port, settings.turn_port, settings.host) == (8000, 3478, "0.0.0.0")
    assert settings.sqlite_path == tmp_path / "peermr-data" / "peermr.sqlite3"
    assert not settings.uses_postgres


def test_file_then_environment_then_flags(tmp_path):
    (tmp_path / "peermr.toml").write_text("port = 9001\nturn_port = 4000\npublic_url = 'https://file.example'\n")
    env = {"PEERMR_DATA_DIR": str(tmp_path), "PEERMR_PORT": "9002"}
    settings = load_settings({}, environ=env)
    assert settings.port == 9002  # environment beats the file
    assert settings.turn_port == 4000  # the file beats the default
    assert settings.base_url == "https://file.example"
    assert settings.secure_cookies
    flagged = load_settings({"port": 9003, "public_url": None}, environ=env)
    assert flagged.port == 9003  # flags beat the environment; None flags are ignored
    assert flagged.public_url == "https://file.example"


@pytest.mark.parametrize(
    "env,message",
    [
        ({"PEERMR_PORT": "http"}, "invalid setting"),
        ({"PEERMR_PORT": "70000"}, r"port must be between 1 and 65535 \(a whole number\), got '70000'"),
        ({"PEERMR_JOB_FAIR_SHARE": "0"}, "job_fair_share must be more than 0 and at most 1"),
        ({"PEERMR_TURN_MIN_PORT": "60000", "PEERMR_TURN_MAX_PORT": "50000"}, "must not be above turn_max_port"),
        ({"PEERMR_PUBLIC_URL": "peermr.example"}, "must start with http"),
        ({"PEERMR_DATABASE_URL": "mysql://x"}, "postgresql://"),
        # Single sign-on and rate limits.
        ({"PEERMR_PASSWORD_LOGIN": "false"}, "password_login = false needs single sign-on"),
        ({"PEERMR_SSO_ISSUER": "idp.example"}, "sso_issuer must be an http"),
        ({"PEERMR_SSO_ISSUER": "https://idp.example"}, "needs sso_client_id and sso_client_secret"),
        (
            {
                "PEERMR_SSO_ISSUER": "https://idp.example",
                "PEERMR_SSO_CLIENT_ID": "c",
                "PEERMR_SSO_CLIENT_SECRET": "s",
                "PEERMR_SSO_SCOPES": "email",
            },
            "sso_scopes must include openid",
        ),
        ({"PEERMR_SSO_ROLE_GROUPS": "admins=root"}, "'admins=root' is not group=role"),
        ({"PEERMR_SSO_DEFAULT_ROLE": "owner"}, "sso_default_role must be one of"),
        ({"PEERMR_API_REQUESTS_PER_MINUTE": "-1"}, "api_requests_per_minute must be at least 0"),
    ],
)
def test_bad_values_are_reported(tmp_path, env, message):
    with pytest.raises(ConfigError, match=message):
        load_settings({"data_dir": str(tmp_path)}, environ=env)


def test_postgres_url_switches_engine(tmp_path):
    settings = load_settings({"data_dir": str(tmp_path)}, environ={"PEERMR_DATABASE_URL": "postgresql://u@h/db"})
    assert settings.uses_postgres


def test_secrets_are_created_once_with_owner_only_permissions(tmp_path):
    first = load_or_create_secrets(tmp_path)
    path = tmp_path / "secrets.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_secrets(tmp_path) == first
    assert len(first.session_key) == 64 and first.session_key != first.turn_secret
    path.chmod(0o644)
    load_or_create_secrets(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_secrets(tmp_path, turn_secret_override="shared").turn_secret == "shared"


@pytest.mark.parametrize(
    "target,expected",
    [
        ("/ui/jobs", "/ui/jobs"),
        ("//evil.example", "/ui"),
        ("https://evil.example", "/ui"),
        ("/\\evil", "/ui"),
        ("", "/ui"),
    ],
)
def test_post_login_redirect_stays_on_site(target, expected):
    assert safe_next(target) == expected


def test_unknown_time_zone_is_reported(tmp_path):
    with pytest.raises(ConfigError, match="not a known time zone"):
        load_settings({"data_dir": str(tmp_path)}, environ={"PEERMR_TIMEZONE": "Mars/Olympus"})
