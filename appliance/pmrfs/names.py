"""Bucket names and object keys: what PMRFS accepts, with messages that say why not."""

from __future__ import annotations

import ipaddress
import re

from appliance.errors import InvalidRequest

BUCKET_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
MAX_KEY_BYTES = 1024
MAX_BUCKETS_PER_ACCOUNT = 20
# Buckets the appliance makes for accounts (job outputs) are named with this prefix.
RESERVED_PREFIX = "peermr-"
RUNS_BUCKET_PREFIX = f"{RESERVED_PREFIX}runs-"


def runs_bucket_name(account_id: int) -> str:
    """The bucket holding an account's job run outputs."""
    return f"{RUNS_BUCKET_PREFIX}{account_id}"


class InvalidName(InvalidRequest):
    """A bucket name or object key PMRFS does not accept (400); the message says why."""


def check_bucket_name(name: str) -> str:
    """S3's rules: 3-63 characters, lowercase letters, digits, hyphens and dots, starting and ending
    with a letter or digit, no two adjacent dots, and not shaped like an IP address."""
    if not 3 <= len(name) <= 63:
        raise InvalidName(f"Bucket name {name!r} must be 3 to 63 characters long.")
    if not BUCKET_NAME_RE.match(name):
        raise InvalidName(
            f"Bucket name {name!r} may contain only lowercase letters, digits, hyphens and dots,"
            " and must start and end with a letter or digit."
        )
    if ".." in name:
        raise InvalidName(f"Bucket name {name!r} must not contain two dots in a row.")
    if name.startswith(RESERVED_PREFIX):
        raise InvalidName(f"Bucket names starting with {RESERVED_PREFIX!r} are reserved for the appliance.")
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        pass
    else:
        raise InvalidName(f"Bucket name {name!r} must not be an IP address.")
    return name


def check_key(key: str) -> str:
    """A path-like key: 1 to 1024 bytes of UTF-8, segments separated by single slashes, no empty,
    "." or ".." segments, no leading or trailing slash, no control characters."""
    if not key:
        raise InvalidName("An object key must not be empty.")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise InvalidName(f"An object key may be at most {MAX_KEY_BYTES} bytes of UTF-8.")
    if any(ord(c) < 0x20 or ord(c) == 0x7F or 0xD800 <= ord(c) <= 0xDFFF for c in key):
        raise InvalidName("An object key must not contain control characters.")
    if key.startswith("/") or key.endswith("/"):
        raise InvalidName(f"Object key {key!r} must not start or end with a slash.")
    if any(segment in ("", ".", "..") for segment in key.split("/")):
        raise InvalidName(f"Object key {key!r} must not contain empty, '.' or '..' segments.")
    return key
