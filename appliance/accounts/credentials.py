"""Random credentials and their stored form.

Tokens carry 256 bits of randomness, so a plain SHA-256 is enough to store
them (a memory-hard KDF is only needed for low-entropy passwords).
"""

import hashlib
import secrets

API_TOKEN_PREFIX = "pmr_"
ENROLMENT_TOKEN_PREFIX = "enr_"
SHOWN_PREFIX_LENGTH = 12


def new_token(prefix: str = "") -> str:
    return prefix + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def shown_prefix(token: str) -> str:
    return token[:SHOWN_PREFIX_LENGTH]


def new_password() -> str:
    """A generated password: 20 URL-safe characters, about 120 bits."""
    return secrets.token_urlsafe(15)
