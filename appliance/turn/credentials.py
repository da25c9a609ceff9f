"""TURN credentials in coturn's "TURN REST API" form, and stateless nonces.

username = "<unix expiry>:<account id>" or "<unix expiry>:<account id>.<run id>"
password = base64(HMAC-SHA1(secret, username))

Any server holding the same secret (ours, or coturn with
``--use-auth-secret --static-auth-secret``) accepts them; ours also reads the
account and run out of the username to meter relayed bytes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from typing import NamedTuple

# A nonce is valid this long; then the client gets 438 Stale Nonce and retries with a fresh one.
NONCE_LIFETIME = 600


class Identity(NamedTuple):
    expiry: int
    account: str
    run: str | None


def password_for(secret: str, username: str) -> str:
    return base64.b64encode(hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()).decode()


def make_username(account_id: int | str, run_id: int | str | None, ttl: int, now: float | None = None) -> str:
    expiry = int((time.time() if now is None else now) + ttl)
    return f"{expiry}:{account_id}" + (f".{run_id}" if run_id is not None else "")


def parse_username(username: str) -> Identity | None:
    expiry, sep, who = username.partition(":")
    if not sep or not expiry.isdigit() or not who:
        return None
    account, _, run = who.partition(".")
    return Identity(int(expiry), account, run or None)


def ice_servers(secret: str, host: str, port: int, account_id: int, run_id: int | None, ttl: int) -> list[dict]:
    """RTCPeerConnection ``iceServers`` (RTCIceServer dictionaries) for a browser of this account (and run)."""
    username = make_username(account_id, run_id, ttl)
    host = f"[{host}]" if ":" in host else host
    return [
        {"urls": [f"stun:{host}:{port}"]},
        {
            "urls": [f"turn:{host}:{port}?transport=udp", f"turn:{host}:{port}?transport=tcp"],
            "username": username,
            "credential": password_for(secret, username),
        },
    ]


class NonceBook:
    """Stateless nonces: "<issued>-<random>-<hmac>", verified and aged without a table."""

    def __init__(self, key: bytes | None = None, lifetime: int = NONCE_LIFETIME):
        self.key = key or secrets.token_bytes(32)
        self.lifetime = lifetime

    def _mac(self, body: str) -> str:
        return hmac.new(self.key, body.encode(), hashlib.sha256).hexdigest()[:24]

    def issue(self, now: float | None = None) -> str:
        body = f"{int(time.time() if now is None else now):x}-{secrets.token_hex(4)}"
        return f"{body}-{self._mac(body)}"

    def check(self, nonce: str, now: float | None = None) -> str:
        """'ok', 'stale' (ours but expired: 438) or 'bad' (not ours: 401)."""
        body, _, mac = nonce.rpartition("-")
        if not body or not hmac.compare_digest(mac, self._mac(body)):
            return "bad"
        issued = int(body.split("-", 1)[0], 16)
        return "ok" if (time.time() if now is None else now) - issued < self.lifetime else "stale"
