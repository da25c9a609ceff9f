"""Per-transfer authorization for browser <-> appliance blob traffic over HTTP.

The appliance hands a worker a URL carrying a grant: an HMAC over what the
worker may do (fetch or upload), which blob, which worker, and until when. The
blob endpoints accept nothing else, so a browser cannot read blobs it was not
asked to store, even of its own account.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from urllib.parse import urlencode

GRANT_SECONDS = 300


class Grants:
    def __init__(self, key: bytes):
        self.key = hmac.new(key, b"pmrfs-grants", hashlib.sha256).digest()

    def _mac(self, op: str, sha256: str, worker_id: str, expires: int) -> str:
        return hmac.new(self.key, f"{op}|{sha256}|{worker_id}|{expires}".encode(), hashlib.sha256).hexdigest()

    def url(self, op: str, sha256: str, worker_id: str) -> str:
        expires = int(time.time()) + GRANT_SECONDS
        query = urlencode(
            {"op": op, "worker": worker_id, "expires": expires, "grant": self._mac(op, sha256, worker_id, expires)}
        )
        return f"/pmrfs/blobs/{sha256}?{query}"

    def check(self, op: str, sha256: str, worker_id: str, expires: int, grant: str) -> bool:
        if expires < time.time():
            return False
        return hmac.compare_digest(grant, self._mac(op, sha256, worker_id, expires))
