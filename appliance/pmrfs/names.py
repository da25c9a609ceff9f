"""Bucket names and object keys: what PMRFS accepts, with messages that say why not."""

from __future__ import annotations

import ipaddress
import re

from appliance.errors import InvalidRequest

BUCKET_NAME_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
MAX_KEY_BYTES = 1024
# Characters no key may hold: control characters (C0, DEL, C1), the backslash, lone surrogates.
REFUSED_IN_KEYS = re.compile(r"[\x00-\x1f\x7f-\x9f\\\ud800-\udfff]")
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
    if not BUCKET_NAME_RE.fullmatch(name):
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


def _why_refused(char: str) -> str:
    code = ord(char)
    if char == "\\":
        return (
            "a backslash (U+005C): Windows and some S3 tools take it for a path separator, so a key"
            " such as a\\..\\..\\x would be written outside the folder it is downloaded into"
        )
    if 0xD800 <= code <= 0xDFFF:
        return f"a lone surrogate (U+{code:04X}), which is not valid Unicode"
    return (
        f"the control character U+{code:04X}: control characters are invisible or rewrite the"
        " text around them in listings, logs and file names"
    )


def check_key(key: str) -> str:
    """A path-like key: 1 to 1024 bytes of UTF-8, segments separated by single slashes, no empty,
    "." or ".." segments, no leading or trailing slash, no control characters or backslashes."""
    if not key:
        raise InvalidName("An object key must not be empty.")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise InvalidName(f"An object key may be at most {MAX_KEY_BYTES} bytes of UTF-8.")
    if refused := REFUSED_IN_KEYS.search(key):
        raise InvalidName(
            f"An object key must not contain {_why_refused(refused.group())}"
            f" (character {refused.start() + 1} of {key!r})."
        )
    if key.startswith("/") or key.endswith("/"):
        raise InvalidName(f"Object key {key!r} must not start or end with a slash.")
    if any(segment in ("", ".", "..") for segment in key.split("/")):
        raise InvalidName(f"Object key {key!r} must not contain empty, '.' or '..' segments.")
    return key
