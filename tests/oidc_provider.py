"""A real OpenID Connect provider for the single sign-on tests: npm's oidc-provider (a certified
implementation) under Node, run by tests/oidc/provider.mjs with the clients and users a test gives.

`make test` installs it (npm ci in tests/oidc). Its development sign-in page takes a user's key as
the login and any password, then asks for consent once per client.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests.support import free_port, terminate, wait_until_serving

HERE = Path(__file__).parent / "oidc"


class OidcProvider:
    def __init__(self, work_dir: Path, clients: list[dict], users: dict[str, dict]):
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.config_path = work_dir / f"oidc-{self.port}.json"
        self.config_path.write_text(json.dumps({"port": self.port, "clients": clients, "users": users}))
        self.log_path = work_dir / f"oidc-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30) -> OidcProvider:
        node = shutil.which("node")
        if node is None or not (HERE / "node_modules" / "oidc-provider").is_dir():
            raise RuntimeError("the OpenID provider needs node and `npm ci --prefix tests/oidc` (make test does it)")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [node, str(HERE / "provider.mjs"), str(self.config_path)], stdout=log, stderr=subprocess.STDOUT
        )
        wait_until_serving(
            self.proc, f"{self.issuer}/.well-known/openid-configuration", "oidc-provider", self.log_path, timeout
        )
        return self

    def stop(self) -> None:
        terminate(self.proc)
