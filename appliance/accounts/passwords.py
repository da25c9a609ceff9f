"""Password hashing with argon2id, off the event loop (a hash takes tens of milliseconds)."""

import asyncio

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from appliance.errors import InvalidRequest

MIN_PASSWORD_LENGTH = 10
MAX_PASSWORD_LENGTH = 256

_hasher = PasswordHasher()  # argon2id, RFC 9106 low-memory profile
# Verified when the email is unknown, so both cases take the same time.
_DUMMY_HASH = _hasher.hash("peermr-timing-equaliser")


class WeakPassword(InvalidRequest):
    pass


def check_strength(password: str) -> None:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise WeakPassword(f"Passwords need at least {MIN_PASSWORD_LENGTH} characters.")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise WeakPassword(f"Passwords may have at most {MAX_PASSWORD_LENGTH} characters.")


async def hash_password(password: str) -> str:
    return await asyncio.to_thread(_hasher.hash, password)


def _verify(encoded: str, password: str) -> bool:
    try:
        return _hasher.verify(encoded, password)
    except (VerificationError, InvalidHashError):
        return False


async def verify_password(encoded: str | None, password: str) -> bool:
    if encoded is None:
        await asyncio.to_thread(_verify, _DUMMY_HASH, password)
        return False
    return await asyncio.to_thread(_verify, encoded, password)
