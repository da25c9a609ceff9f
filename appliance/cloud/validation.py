"""What the Cloud Data form accepts, with messages that say why not.

Every check returns the cleaned value or raises :class:`InvalidSetting` naming the field, so the page
can show each message next to its field.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

import msgspec

from appliance.errors import InvalidRequest

PROVIDERS = ("s3", "gcs")
PROVIDER_NAMES = {"s3": "Amazon S3 or an S3-compatible server", "gcs": "Google Cloud Storage"}
GCS_ENDPOINT = "https://storage.googleapis.com"
# Region used when the field is left empty: AWS's default, and the one GCS's XML API expects.
DEFAULT_REGION = {"s3": "us-east-1", "gcs": "auto"}

S3_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")
GCS_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*[a-z0-9]$")
# Prefixes and suffixes AWS reserves for its own bucket kinds (access points, directory buckets...).
S3_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
S3_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
# AWS region names (us-east-1, eu-central-2, us-gov-west-1, cn-north-1, ap-southeast-5...).
AWS_REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$")
# Other S3-compatible servers name regions freely ("auto", "garage", "de-fra"); keep them tame.
REGION_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
MAX_REGION = 32
# Printable ASCII without spaces: what access keys and secrets are made of everywhere.
KEY_RE = re.compile(r"^[\x21-\x7e]+$")
MAX_ACCESS_KEY_ID = 128
MAX_SECRET = 256
MAX_ENDPOINT = 2048


class InvalidSetting(InvalidRequest):
    """A field the Cloud Data page does not accept (400); ``field`` names it, the message says why."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class InvalidSettings(InvalidRequest):
    """One or more fields refused (400): ``errors`` (also in ``extra``) maps each field to its message."""

    def __init__(self, errors: dict[str, str]):
        super().__init__(" ".join(errors.values()))
        self.errors = errors
        self.extra = {"errors": errors}


class CleanSettings(msgspec.Struct, frozen=True):
    """Validated settings, with empty fields replaced by their defaults where a default exists."""

    provider: str
    endpoint_url: str
    region: str
    bucket: str
    access_key_id: str


def check_provider(provider: str) -> str:
    provider = provider.strip().lower()
    if provider not in PROVIDERS:
        raise InvalidSetting("provider", "Choose Amazon S3 (or an S3-compatible server) or Google Cloud Storage.")
    return provider


def check_endpoint_url(url: str, provider: str) -> str:
    """An http(s) URL naming a server only (scheme, host, optional port); empty means the provider's default."""
    url = url.strip()
    if not url:
        return GCS_ENDPOINT if provider == "gcs" else ""
    if len(url) > MAX_ENDPOINT:
        raise InvalidSetting("endpoint_url", f"The endpoint URL may be at most {MAX_ENDPOINT} characters long.")
    example = "e.g. https://s3.example.com or http://10.0.0.5:9000"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidSetting("endpoint_url", f"The endpoint URL is not a valid URL ({example}).") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidSetting("endpoint_url", f"The endpoint URL must start with http:// or https:// ({example}).")
    if not parts.hostname:
        raise InvalidSetting("endpoint_url", f"The endpoint URL must name a host ({example}).")
    if parts.username is not None or parts.password is not None:
        raise InvalidSetting(
            "endpoint_url", "The endpoint URL must not contain a user name or password; use the access key fields."
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise InvalidSetting(
            "endpoint_url", f"The endpoint URL must be the server's address only, without a path or query ({example})."
        )
    if any(c.isspace() for c in url):
        raise InvalidSetting("endpoint_url", "The endpoint URL must not contain spaces.")
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def check_region(region: str, provider: str, endpoint_url: str) -> str:
    region = region.strip().lower()
    if not region:
        return DEFAULT_REGION[provider]
    if len(region) > MAX_REGION or not REGION_RE.match(region):
        raise InvalidSetting(
            "region",
            f"The region must be up to {MAX_REGION} lowercase letters, digits and single hyphens (e.g. us-east-1).",
        )
    if provider == "s3" and not endpoint_url and not AWS_REGION_RE.match(region):
        raise InvalidSetting(
            "region", f"{region!r} is not an AWS region: AWS regions look like us-east-1 or eu-central-1."
        )
    return region


def check_bucket(bucket: str, provider: str) -> str:
    """S3's bucket naming rules; for GCS its own (underscores allowed, dotted names up to 222 characters)."""
    bucket = bucket.strip()
    if not bucket:
        raise InvalidSetting("bucket", "Enter the bucket's name.")
    if provider == "gcs":
        _check_gcs_bucket(bucket)
    else:
        _check_s3_bucket(bucket)
    if ".." in bucket or ".-" in bucket or "-." in bucket:
        raise InvalidSetting("bucket", "A bucket name must not contain '..', '.-' or '-.'.")
    if _is_ipv4_address(bucket):
        raise InvalidSetting("bucket", "A bucket name must not be an IP address.")
    return bucket


def _check_gcs_bucket(bucket: str) -> None:
    longest = 222 if "." in bucket else 63
    if not 3 <= len(bucket) <= longest:
        raise InvalidSetting("bucket", f"A Cloud Storage bucket name must be 3 to {longest} characters long.")
    if not GCS_BUCKET_RE.match(bucket):
        raise InvalidSetting(
            "bucket",
            "A Cloud Storage bucket name may contain only lowercase letters, digits, hyphens, underscores and"
            " dots, and must start and end with a letter or digit.",
        )
    if any(len(part) > 63 for part in bucket.split(".")):
        raise InvalidSetting("bucket", "Each dot-separated part of a bucket name may be at most 63 characters.")
    if bucket.startswith("goog") or "google" in bucket:
        raise InvalidSetting("bucket", "Cloud Storage bucket names must not start with 'goog' or contain 'google'.")


def _check_s3_bucket(bucket: str) -> None:
    if not 3 <= len(bucket) <= 63:
        raise InvalidSetting("bucket", "An S3 bucket name must be 3 to 63 characters long.")
    if not S3_BUCKET_RE.match(bucket):
        raise InvalidSetting(
            "bucket",
            "An S3 bucket name may contain only lowercase letters, digits, hyphens and dots,"
            " and must start and end with a letter or digit.",
        )
    if bucket.startswith(S3_RESERVED_PREFIXES) or bucket.endswith(S3_RESERVED_SUFFIXES):
        raise InvalidSetting("bucket", f"S3 reserves bucket names like {bucket!r} for its own kinds of bucket.")


def _is_ipv4_address(name: str) -> bool:
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return False
    return True


def check_access_key_id(access_key_id: str) -> str:
    access_key_id = access_key_id.strip()
    if not access_key_id:
        raise InvalidSetting("access_key_id", "Enter the access key id.")
    if len(access_key_id) > MAX_ACCESS_KEY_ID or not KEY_RE.match(access_key_id):
        raise InvalidSetting(
            "access_key_id",
            f"The access key id must be up to {MAX_ACCESS_KEY_ID} printable characters without spaces.",
        )
    return access_key_id


def check_secret(secret: str) -> str:
    """A new secret access key (whitespace around it is dropped, as when it is pasted)."""
    secret = secret.strip()
    if len(secret) > MAX_SECRET or not KEY_RE.match(secret):
        raise InvalidSetting(
            "secret_access_key",
            f"The secret access key must be up to {MAX_SECRET} printable characters without spaces.",
        )
    return secret


def clean(provider: str, endpoint_url: str, region: str, bucket: str, access_key_id: str) -> CleanSettings:
    """Every field but the secret; raises :class:`InvalidSettings` with a message for each field refused."""
    errors: dict[str, str] = {}

    def checked(check, *args) -> str:
        try:
            return check(*args)
        except InvalidSetting as exc:
            errors[exc.field] = str(exc)
            return ""

    provider = checked(check_provider, provider)
    if errors:  # the other rules depend on the provider
        raise InvalidSettings(errors)
    raw_endpoint = endpoint_url
    endpoint_url = checked(check_endpoint_url, endpoint_url, provider)
    settings = CleanSettings(
        provider=provider,
        endpoint_url=endpoint_url,
        # A refused endpoint still counts as "not AWS" for the region's rules.
        region=checked(check_region, region, provider, endpoint_url or raw_endpoint.strip()),
        bucket=checked(check_bucket, bucket, provider),
        access_key_id=checked(check_access_key_id, access_key_id),
    )
    if errors:
        raise InvalidSettings(errors)
    return settings
