"""Cloud Data: what the settings form accepts, and the encryption key in secrets.json."""

from __future__ import annotations

import json
import multiprocessing
import stat

import pytest
from cryptography.fernet import Fernet

from appliance.cloud import service
from appliance.cloud.validation import InvalidSetting, InvalidSettings, check_secret, clean
from appliance.secret_keys import load_or_create_secrets


def errors_of(**fields) -> dict[str, str]:
    values = {"provider": "s3", "endpoint_url": "", "region": "", "bucket": "data", "access_key_id": "AKID"}
    with pytest.raises(InvalidSettings) as info:
        clean(**{**values, **fields})
    return info.value.errors


def test_defaults_fill_the_empty_fields():
    aws = clean("s3", "", "", "my-data", "AKIDEXAMPLE")
    assert (aws.endpoint_url, aws.region) == ("", "us-east-1")
    gcs = clean("GCS", " ", "", "my_data", "GOOG1EXAMPLE")
    assert (gcs.provider, gcs.endpoint_url, gcs.region) == ("gcs", "https://storage.googleapis.com", "auto")
    local = clean("s3", "http://LOCALHOST:9000/", "garage", "data", "k")
    assert (local.endpoint_url, local.region) == ("http://localhost:9000", "garage")
    assert clean("s3", "https://[::1]:9000", "", "data", "k").endpoint_url == "https://[::1]:9000"


@pytest.mark.parametrize(
    "url,message",
    [
        ("ftp://files.example.com", "must start with http:// or https://"),
        ("s3.example.com", "must start with http:// or https://"),
        ("https://", "must name a host"),
        ("https://s3.example.com/bucket", "without a path or query"),
        ("https://s3.example.com?x=1", "without a path or query"),
        ("https://user:pw@s3.example.com", "must not contain a user name or password"),
        ("http://s3.example.com:99999", "not a valid URL"),
    ],
)
def test_endpoint_must_be_an_http_url_of_a_server(url, message):
    assert message in errors_of(endpoint_url=url)["endpoint_url"]


@pytest.mark.parametrize(
    "bucket,message",
    [
        ("ab", "3 to 63 characters"),
        ("a" * 64, "3 to 63 characters"),
        ("My-Bucket", "only lowercase letters, digits, hyphens and dots"),
        ("my_bucket", "only lowercase letters, digits, hyphens and dots"),
        ("-data", "start and end with a letter or digit"),
        ("my..data", "must not contain '..'"),
        ("192.168.1.7", "must not be an IP address"),
        ("xn--data", "S3 reserves"),
        ("data-s3alias", "S3 reserves"),
        ("", "Enter the bucket's name"),
    ],
)
def test_s3_bucket_names_follow_s3_rules(bucket, message):
    assert message in errors_of(bucket=bucket)["bucket"]


def test_gcs_bucket_names_follow_gcs_rules():
    assert clean("gcs", "", "", "team_data-2026", "GOOG1E").bucket == "team_data-2026"
    assert clean("gcs", "", "", "a" * 60 + "." + "b" * 60, "GOOG1E").bucket.startswith("aaa")
    assert "must not start with 'goog'" in errors_of(provider="gcs", bucket="goog-data")["bucket"]
    assert "lowercase letters, digits, hyphens, underscores" in errors_of(provider="gcs", bucket="Data")["bucket"]


def test_regions():
    assert clean("s3", "", "eu-central-1", "data", "k").region == "eu-central-1"
    assert clean("s3", "", "US-GOV-WEST-1", "data", "k").region == "us-gov-west-1"
    assert "not an AWS region" in errors_of(region="europe")["region"]
    # Other S3-compatible servers name their regions as they like, within a tame format.
    assert clean("s3", "https://r2.example.com", "auto", "data", "k").region == "auto"
    assert "lowercase letters, digits and single hyphens" in errors_of(region="us east 1")["region"]
    assert "lowercase letters, digits and single hyphens" in errors_of(region="a" * 33)["region"]


def test_every_refused_field_gets_its_message_at_once():
    errors = errors_of(endpoint_url="gopher://x", bucket="B", access_key_id="has space")
    assert set(errors) == {"endpoint_url", "bucket", "access_key_id"}
    assert "Choose Amazon S3" in errors_of(provider="azure")["provider"]


def test_secrets_are_printable_without_spaces():
    assert check_secret("  wJalrXUtnFEMI/K7MDENG+bPxRfiCY  \n") == "wJalrXUtnFEMI/K7MDENG+bPxRfiCY"
    for bad in ("two words", "tab\there", "x" * 257, "é"):
        with pytest.raises(InvalidSetting, match="printable characters without spaces"):
            check_secret(bad)


def test_a_new_data_dir_gets_a_fernet_key(tmp_path):
    key = load_or_create_secrets(tmp_path).cloud_data_key
    keys = service.CloudKeys(key)
    token = keys.encrypt("the-secret")
    assert "the-secret" not in token and keys.decrypt(token) == "the-secret" and keys.readable(token)
    assert Fernet(key.encode()).decrypt(token.encode()) == b"the-secret"
    other = service.CloudKeys(Fernet.generate_key().decode())
    assert not other.readable(token)
    with pytest.raises(service.SecretUnreadable, match="enter it again"):
        other.decrypt(token)


def old_secrets_file(data_dir):
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "secrets.json"
    path.write_text(json.dumps({"session_key": "s" * 64, "turn_secret": "t" * 64}))
    path.chmod(0o600)
    return path


def test_an_existing_data_dir_gets_the_key_added_on_its_next_start(tmp_path):
    path = old_secrets_file(tmp_path)
    secrets = load_or_create_secrets(tmp_path)
    assert (secrets.session_key, secrets.turn_secret) == ("s" * 64, "t" * 64)
    Fernet(secrets.cloud_data_key.encode())  # a valid key
    stored = json.loads(path.read_text())
    assert stored == {"session_key": "s" * 64, "turn_secret": "t" * 64, "cloud_data_key": secrets.cloud_data_key}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_secrets(tmp_path) == secrets
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def _load_key(data_dir: str, queue) -> None:
    from pathlib import Path

    queue.put(load_or_create_secrets(Path(data_dir)).cloud_data_key)


def test_processes_starting_together_on_an_old_data_dir_agree_on_one_key(tmp_path):
    old_secrets_file(tmp_path)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    processes = [context.Process(target=_load_key, args=(str(tmp_path), queue)) for _ in range(6)]
    for process in processes:
        process.start()
    keys = {queue.get(timeout=60) for _ in processes}
    for process in processes:
        process.join(60)
    assert keys == {json.loads((tmp_path / "secrets.json").read_text())["cloud_data_key"]}
