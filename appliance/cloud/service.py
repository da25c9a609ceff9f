"""Cloud Data: an account's S3 or GCS bucket, for the s3/gcs storage type.

Worker browsers read and write the bucket themselves through presigned URLs (SigV4, made here with
boto3 from the account's key); the appliance only signs, checks the settings, reads a run's output
back for its download and deletes what a run leaves. GCS is reached through its S3-compatible XML
API with an HMAC key.

The secret access key is kept encrypted (Fernet, key in secrets.json: the appliance's one
:class:`CloudKeys`, built by ``create_app`` and passed to whoever reads the settings), decrypted only
into a :class:`CloudStorage` in memory, never rendered and never logged (``repr`` masks it).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
from urllib.parse import urlsplit

import boto3
import httpx
import msgspec
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ConnectTimeoutError, EndpointConnectionError, SSLError
from botocore.exceptions import ReadTimeoutError as BotoReadTimeout
from cryptography.fernet import Fernet, InvalidToken

from appliance.accounts.users import email_of
from appliance.audit import service as audit
from appliance.clock import now
from appliance.cloud.tables import CloudSettings
from appliance.cloud.validation import PROVIDER_NAMES, InvalidSetting, InvalidSettings, check_secret, clean
from appliance.errors import Unavailable

log = logging.getLogger(__name__)

# SigV4 presigned URLs live at most 7 days.
MAX_EXPIRES = 7 * 24 * 3600
# S3's DeleteObjects takes at most 1000 keys.
DELETE_BATCH = 1000
# The CORS rule the page puts on a bucket, recognised by its id when it is replaced.
CORS_RULE_ID = "peermr-workers"
CORS_MAX_AGE = 3600
# The key a CORS check's preflight names (nothing is written there).
CORS_CHECK_KEY = ".peermr-cors-check"


class CloudDataError(Unavailable):
    """A bucket operation failed (503); the message is meant for people (no secrets in it)."""


class SecretUnreadable(CloudDataError):
    """The saved secret cannot be decrypted with this appliance's key (secrets.json was replaced): the
    account must enter it again (400)."""

    status = 400


class ObjectNotFound(CloudDataError):
    status = 404


class CloudStorage(msgspec.Struct, frozen=True):
    """An account's bucket with its credentials, decrypted: keep it in memory only."""

    provider: str
    endpoint_url: str
    region: str
    bucket: str
    access_key_id: str
    secret_access_key: str

    def __repr__(self) -> str:
        return (
            f"CloudStorage(provider={self.provider!r}, endpoint_url={self.endpoint_url!r}, region={self.region!r},"
            f" bucket={self.bucket!r}, access_key_id={self.access_key_id!r}, secret_access_key='***')"
        )

    __str__ = __repr__

    @property
    def origin(self) -> str:
        """scheme://host[:port] of the presigned URLs: what the sandbox's connect-src must allow."""
        return _origin(self)

    @property
    def where(self) -> str:
        """The server, as messages name it."""
        return self.endpoint_url or f"AWS S3 ({self.region})"


class SettingsView(msgspec.Struct, frozen=True):
    """The saved settings as the page shows them: everything but the secret."""

    provider: str
    endpoint_url: str
    region: str
    bucket: str
    access_key_id: str
    # A secret is saved, and this appliance's key decrypts it.
    secret_readable: bool
    updated_at: dt.datetime

    @property
    def provider_name(self) -> str:
        return PROVIDER_NAMES[self.provider]


# --- the secret at rest ---------------------------------------------------------------------


class CloudKeys:
    """The appliance's key (``cloud_data_key`` in secrets.json) for every account's secret at rest."""

    def __init__(self, key: str):
        self._cipher = Fernet(key.encode())

    def encrypt(self, secret: str) -> str:
        return self._cipher.encrypt(secret.encode()).decode()

    def decrypt(self, token: str) -> str:
        try:
            return self._cipher.decrypt(token.encode()).decode()
        except (InvalidToken, ValueError):
            raise SecretUnreadable(
                "The saved secret access key cannot be decrypted with this appliance's key"
                " (was secrets.json replaced?): enter it again."
            ) from None

    def readable(self, token: str) -> bool:
        try:
            self.decrypt(token)
        except SecretUnreadable:
            return False
        return True


# --- settings -------------------------------------------------------------------------------


async def _row(account_id: int) -> dict | None:
    return await CloudSettings.select().where(CloudSettings.account == account_id).first()


# What the audit log keeps of saved settings: where the bucket is, never the key id or the secret.
AUDITED = ("provider", "endpoint_url", "region", "bucket")


def _audited(row: dict | None) -> dict | None:
    return None if row is None else {k: row[k] for k in AUDITED}


async def _target(account_id: int) -> str:
    return f"cloud data settings of {await email_of(account_id) or f'account {account_id}'}"


async def settings_of(keys: CloudKeys, account_id: int) -> SettingsView | None:
    row = await _row(account_id)
    if row is None:
        return None
    return SettingsView(
        provider=row["provider"],
        endpoint_url=row["endpoint_url"],
        region=row["region"],
        bucket=row["bucket"],
        access_key_id=row["access_key_id"],
        secret_readable=keys.readable(row["secret_access_key_encrypted"]),
        updated_at=row["updated_at"],
    )


async def save_settings(
    keys: CloudKeys,
    account_id: int,
    *,
    provider: str,
    endpoint_url: str,
    region: str,
    bucket: str,
    access_key_id: str,
    secret_access_key: str = "",
) -> SettingsView:
    """Validate and store an account's settings. An empty secret keeps the saved one (same key id only).

    Raises :class:`InvalidSettings` (nothing stored) with a message per refused field.
    """
    errors: dict[str, str] = {}
    try:
        settings = clean(provider, endpoint_url, region, bucket, access_key_id)
    except InvalidSettings as exc:
        errors.update(exc.errors)
        settings = None
    async with CloudSettings._meta.db.transaction():
        row = await _row(account_id)
        token = None
        if secret_access_key.strip():
            try:
                token = keys.encrypt(check_secret(secret_access_key))
            except InvalidSetting as exc:
                errors[exc.field] = str(exc)
        elif row is None or not keys.readable(row["secret_access_key_encrypted"]):
            errors["secret_access_key"] = "Enter the secret access key."
        elif settings is not None and settings.access_key_id != row["access_key_id"]:
            errors["secret_access_key"] = "A different access key id needs its secret access key: enter it too."
        if errors:
            raise InvalidSettings(errors)
        assert settings is not None
        values = {
            CloudSettings.provider: settings.provider,
            CloudSettings.endpoint_url: settings.endpoint_url,
            CloudSettings.region: settings.region,
            CloudSettings.bucket: settings.bucket,
            CloudSettings.access_key_id: settings.access_key_id,
            CloudSettings.updated_at: now(),
        }
        if token is not None:
            values[CloudSettings.secret_access_key_encrypted] = token
        if row is None:
            await CloudSettings.insert(
                CloudSettings(account=account_id, **{column._meta.name: value for column, value in values.items()})
            )
        else:
            await CloudSettings.update(values).where(CloudSettings.account == account_id)
    log.info("cloud data settings of account %s saved (%s bucket %s)", account_id, settings.provider, settings.bucket)
    after = {**{k: getattr(settings, k) for k in AUDITED}, "key_replaced": token is not None}
    await audit.note("cloud.saved", await _target(account_id), _audited(row), after)
    view = await settings_of(keys, account_id)
    assert view is not None
    return view


async def remove_settings(account_id: int) -> bool:
    removed = (
        await CloudSettings.delete()
        .where(CloudSettings.account == account_id)
        .returning(*(getattr(CloudSettings, k) for k in AUDITED))
    )
    if removed:
        log.info("cloud data settings of account %s removed", account_id)
        await audit.note("cloud.removed", await _target(account_id), _audited(removed[0]), None)
    return bool(removed)


async def storage_for(keys: CloudKeys, account_id: int) -> CloudStorage | None:
    """The account's bucket with its decrypted credentials, or None when it has none saved.

    Raises :class:`SecretUnreadable` when the saved secret cannot be decrypted.
    """
    row = await _row(account_id)
    if row is None:
        return None
    return CloudStorage(
        provider=row["provider"],
        endpoint_url=row["endpoint_url"],
        region=row["region"],
        bucket=row["bucket"],
        access_key_id=row["access_key_id"],
        secret_access_key=keys.decrypt(row["secret_access_key_encrypted"]),
    )


# --- clients and presigned URLs -------------------------------------------------------------


_CHECKSUMS = {"request_checksum_calculation": "when_required", "response_checksum_validation": "when_required"}
# Reading and writing: a few retries of throttling and transient errors.
DATA_CONFIG = Config(connect_timeout=10, read_timeout=60, retries={"mode": "standard", "max_attempts": 3}, **_CHECKSUMS)
# Checking settings on the page: one attempt, answered quickly.
PROBE_CONFIG = Config(
    connect_timeout=5, read_timeout=10, retries={"mode": "standard", "total_max_attempts": 1}, **_CHECKSUMS
)


@functools.lru_cache(maxsize=64)
def _client(storage: CloudStorage, probe: bool = False):
    """A boto3 S3 client for this bucket (clients are thread-safe; creating one takes a while)."""
    config = (PROBE_CONFIG if probe else DATA_CONFIG).merge(
        Config(
            signature_version="s3v4",
            # A given endpoint is an S3-compatible server, often without wildcard DNS: path-style URLs.
            # AWS itself: virtual-hosted URLs on the bucket's regional host (no redirect, which CORS
            # preflights cannot follow).
            s3={"addressing_style": "path" if storage.endpoint_url else "virtual"},
        )
    )
    # A session per client: boto3's default session is not safe to share between threads.
    return boto3.session.Session().client(
        "s3",
        endpoint_url=storage.endpoint_url or None,
        region_name=storage.region,
        aws_access_key_id=storage.access_key_id,
        aws_secret_access_key=storage.secret_access_key,
        config=config,
    )


def _check_expires(expires: int) -> int:
    if not 1 <= expires <= MAX_EXPIRES:
        raise ValueError(f"a presigned URL expires after 1 to {MAX_EXPIRES} seconds, not {expires}")
    return expires


def _check_key(key: str) -> str:
    if not key or len(key.encode()) > 1024:
        raise ValueError("an object key is 1 to 1024 bytes of UTF-8")
    return key


def presign_get(storage: CloudStorage, key: str, expires: int = 3600) -> str:
    """A URL anyone may GET (or HEAD) the object at for ``expires`` seconds."""
    return _client(storage).generate_presigned_url(
        "get_object",
        Params={"Bucket": storage.bucket, "Key": _check_key(key)},
        ExpiresIn=_check_expires(expires),
    )


def presign_put(storage: CloudStorage, key: str, expires: int = 3600) -> str:
    """A URL anyone may PUT the object's bytes to (any Content-Type) for ``expires`` seconds."""
    return _client(storage).generate_presigned_url(
        "put_object",
        Params={"Bucket": storage.bucket, "Key": _check_key(key)},
        ExpiresIn=_check_expires(expires),
    )


@functools.lru_cache(maxsize=64)
def _origin(storage: CloudStorage) -> str:
    parts = urlsplit(presign_get(storage, "origin", 60))
    return f"{parts.scheme}://{parts.netloc}"


# --- reading, deleting, checking ------------------------------------------------------------


def _client_error_message(storage: CloudStorage, exc: ClientError, action: str) -> str:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
    headers = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    bucket = storage.bucket
    if code in ("404", "NoSuchBucket"):
        return f"There is no bucket named {bucket} at {storage.where}."
    if code == "InvalidAccessKeyId":
        return f"{storage.where} does not know the access key id {storage.access_key_id}."
    if code == "SignatureDoesNotMatch":
        return "The secret access key does not match the access key id (the request signature was refused)."
    if code in ("AccessDenied", "AllAccessDisabled", "AccountProblem"):
        return f"The key may not {action} bucket {bucket} (access denied)."
    if code in ("301", "PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException"):
        region = headers.get("x-amz-bucket-region") or error.get("Region")
        if region:
            return f"Bucket {bucket} is in region {region}, not {storage.region}: set the region to {region}."
        return f"Bucket {bucket} is not in region {storage.region}."
    if code in ("403", "Forbidden"):
        return f"{storage.where} refused the request to {action} bucket {bucket} (403 Forbidden)."
    message = str(error.get("Message") or "").strip()
    return f"{storage.where} answered {status} {code}" + (f": {message}" if message else "") + "."


def _transport_error_message(storage: CloudStorage, exc: BotoCoreError) -> str:
    if isinstance(exc, (ConnectTimeoutError, BotoReadTimeout)):
        return f"{storage.where} did not answer in time."
    if isinstance(exc, SSLError):
        return f"The TLS connection to {storage.where} failed: {exc}"
    if isinstance(exc, EndpointConnectionError):
        return f"Cannot connect to {storage.where}: check the endpoint URL, and that this server can reach it."
    return f"The request to {storage.where} failed: {exc}"


def _failure(storage: CloudStorage, exc: Exception, action: str) -> CloudDataError:
    if isinstance(exc, ClientError):
        return CloudDataError(_client_error_message(storage, exc, action))
    return CloudDataError(_transport_error_message(storage, exc))


def _read_object(storage: CloudStorage, key: str) -> bytes:
    try:
        response = _client(storage).get_object(Bucket=storage.bucket, Key=_check_key(key))
        with response["Body"] as body:
            return body.read()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            raise ObjectNotFound(f"There is no object {key} in bucket {storage.bucket}.") from None
        raise _failure(storage, exc, "read from") from None
    except BotoCoreError as exc:
        raise _failure(storage, exc, "read from") from None


async def read_object(storage: CloudStorage, key: str) -> bytes:
    """The object's bytes. Raises :class:`ObjectNotFound` or :class:`CloudDataError`."""
    return await asyncio.to_thread(_read_object, storage, key)


def _delete_prefix(storage: CloudStorage, prefix: str) -> int:
    client = _client(storage)
    deleted = 0
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=storage.bucket, Prefix=prefix):
            keys = [item["Key"] for item in page.get("Contents", [])]
            if storage.provider == "gcs":
                # GCS's XML API has no multi-object delete.
                for key in keys:
                    client.delete_object(Bucket=storage.bucket, Key=key)
                deleted += len(keys)
                continue
            for start in range(0, len(keys), DELETE_BATCH):
                batch = keys[start : start + DELETE_BATCH]
                response = client.delete_objects(
                    Bucket=storage.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
                )
                if errors := response.get("Errors"):
                    first = errors[0]
                    raise CloudDataError(
                        f"{len(errors)} object(s) under {prefix} were not deleted; the first, {first.get('Key')}:"
                        f" {first.get('Code')} {first.get('Message', '')}".rstrip()
                    )
                deleted += len(batch)
    except (ClientError, BotoCoreError) as exc:
        raise _failure(storage, exc, "delete from") from None
    return deleted


async def delete_prefix(storage: CloudStorage, prefix: str) -> int:
    """Delete every object whose key starts with ``prefix`` (never empty); returns how many."""
    if not prefix:
        raise ValueError("delete_prefix needs a prefix: it never empties a whole bucket")
    return await asyncio.to_thread(_delete_prefix, storage, prefix)


def _check_access(storage: CloudStorage) -> str | None:
    client = _client(storage, probe=True)
    try:
        client.head_bucket(Bucket=storage.bucket)
        return None
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code not in ("403", "400"):
            return _client_error_message(storage, exc, "use")
        first = exc
    except BotoCoreError as exc:
        return _transport_error_message(storage, exc)
    # A HEAD answer has no body to say why; a one-key listing does (unknown key id, bad signature...).
    try:
        client.list_objects_v2(Bucket=storage.bucket, MaxKeys=1)
    except ClientError as exc:
        return _client_error_message(storage, exc, "list")
    except BotoCoreError as exc:
        return _transport_error_message(storage, exc)
    return _client_error_message(storage, first, "use")


async def check_access(storage: CloudStorage) -> str | None:
    """None when the bucket exists and the key may use it, else a readable reason."""
    return await asyncio.to_thread(_check_access, storage)


def worker_cors_rule(origins: list[str]) -> dict:
    """The CORS rule that lets worker pages on these origins GET and PUT through presigned URLs."""
    return {
        "ID": CORS_RULE_ID,
        "AllowedOrigins": list(origins),
        "AllowedMethods": ["GET", "PUT", "HEAD"],
        "AllowedHeaders": ["*"],
        "ExposeHeaders": ["ETag", "Content-Length"],
        "MaxAgeSeconds": CORS_MAX_AGE,
    }


def gcs_cors_json(origins: list[str]) -> str:
    """The same rule in the form `gcloud storage buckets update --cors-file` takes."""
    rule = [
        {
            "origin": list(origins),
            "method": ["GET", "PUT", "HEAD"],
            "responseHeader": ["Content-Type", "ETag", "Content-Length"],
            "maxAgeSeconds": CORS_MAX_AGE,
        }
    ]
    return msgspec.json.format(msgspec.json.encode(rule), indent=2).decode()


def _set_worker_cors(storage: CloudStorage, origins: list[str]) -> None:
    client = _client(storage, probe=True)
    try:
        try:
            rules = client.get_bucket_cors(Bucket=storage.bucket)["CORSRules"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "NoSuchCORSConfiguration":
                raise
            rules = []
        # Ours first: S3 applies the first rule that matches a request. Other rules are kept.
        rules = [worker_cors_rule(origins)] + [rule for rule in rules if rule.get("ID") != CORS_RULE_ID]
        client.put_bucket_cors(Bucket=storage.bucket, CORSConfiguration={"CORSRules": rules})
    except (ClientError, BotoCoreError) as exc:
        raise _failure(storage, exc, "change the CORS configuration of") from None


async def set_worker_cors(storage: CloudStorage, origins: list[str]) -> str | None:
    """Put the workers' CORS rule on the bucket (replacing an earlier one, keeping others).

    None when done, else a readable reason. GCS's XML API cannot set CORS: use :func:`gcs_cors_json`.
    """
    if storage.provider == "gcs":
        return "Cloud Storage's S3-compatible API cannot change CORS settings: use the gcloud command below."
    if not origins:
        raise ValueError("no origins to allow")
    try:
        await asyncio.to_thread(_set_worker_cors, storage, origins)
    except CloudDataError as exc:
        return str(exc)
    log.info("worker CORS rule set on bucket %s for %s", storage.bucket, ", ".join(origins))
    await audit.note("cloud.cors", f"bucket {storage.bucket} at {storage.where}", None, {"origins": origins})
    return None


async def check_worker_cors(storage: CloudStorage, origin: str) -> str | None:
    """None when the bucket answers a browser's CORS preflight for a PUT from ``origin`` (a page
    there may PUT and GET through presigned URLs), else why not. Sends the preflight itself."""
    # A preflight carries no credentials: the object's URL without the signature (kept out of logs too).
    url = presign_put(storage, CORS_CHECK_KEY, 60).split("?", 1)[0]
    headers = {
        "Origin": origin,
        "Access-Control-Request-Method": "PUT",
        "Access-Control-Request-Headers": "content-type",
    }
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.options(url, headers=headers)
    except httpx.HTTPError as exc:
        return f"Cannot reach {storage.where} to check its CORS settings: {type(exc).__name__}."
    allowed_origin = response.headers.get("access-control-allow-origin")
    methods = {m.strip().upper() for m in response.headers.get("access-control-allow-methods", "").split(",")}
    if allowed_origin not in (origin, "*") or not ({"PUT", "GET"} <= methods or "*" in methods):
        return f"The bucket's CORS settings do not let pages on {origin} PUT and GET its objects."
    return None
