"""The REST API as command-line commands use it: --server/--token (or PEERMR_SERVER/PEERMR_TOKEN),
errors turned into one readable line."""

from __future__ import annotations

import argparse
import contextlib
import os

import httpx

from appliance.commands import CommandError, token_from

TIMEOUT = httpx.Timeout(60.0, connect=10.0)


def _sentence(detail: str) -> str:
    """A server message as a CLI message: "Bucket x not found." -> "bucket x not found"."""
    detail = detail.strip().rstrip(".")
    if len(detail) > 1 and detail[0].isupper() and detail[1].islower():
        detail = detail[0].lower() + detail[1:]
    return detail


class Api:
    def __init__(self, args: argparse.Namespace):
        server = args.server or os.environ.get("PEERMR_SERVER", "")
        token = token_from(args)
        if not server:
            raise CommandError("no server: pass --server URL or set PEERMR_SERVER")
        if not token:
            raise CommandError("no API token: set PEERMR_TOKEN or pass --token-file FILE (see `peermr token create`)")
        self.server = server.rstrip("/")
        self.client = httpx.Client(
            base_url=self.server + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT
        )

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def fail(self, response: httpx.Response) -> CommandError:
        try:
            detail = response.json().get("detail") or response.reason_phrase
        except (ValueError, AttributeError):
            detail = response.text.strip()[:200] or response.reason_phrase
        if response.status_code == 401:
            return CommandError(f"the server refused the token: {_sentence(detail)}")
        return CommandError(_sentence(str(detail)))

    @contextlib.contextmanager
    def reaching(self):
        try:
            yield
        except httpx.TimeoutException as exc:
            raise CommandError(f"{self.server} did not answer in time ({exc})") from None
        except httpx.RemoteProtocolError as exc:
            raise CommandError(f"the connection to {self.server} broke off: {exc}") from None
        except httpx.TransportError as exc:
            raise CommandError(f"cannot reach {self.server}: {exc}") from None

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        with self.reaching():
            response = self.client.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise self.fail(response)
        return response
