"""Which origins job code may fetch from and load scripts and WebAssembly from.

The appliance itself always; beyond it, the origins of ``PEERMR_FETCH_ORIGINS`` plus those an
admin adds in Admin → Settings. The sandbox enforces the list twice: the task's Web Worker gets
a Content-Security-Policy naming only these origins (its frame's, ``frame_policy``), and its
``fetch`` refuses others with a message that says why.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import urlencode, urlsplit

from appliance.audit import service as audit
from appliance.clock import now
from appliance.config import Settings, parse_origins
from appliance.errors import InvalidRequest
from appliance.jobs.tables import SandboxPolicy


async def admin_origins() -> str:
    row = await SandboxPolicy.select(SandboxPolicy.fetch_origins).first()
    return row["fetch_origins"] if row else ""


async def allowed_origins(settings: Settings) -> list[str]:
    return list(dict.fromkeys(parse_origins(settings.fetch_origins) + parse_origins(await admin_origins())))


async def save_admin_origins(text: str) -> None:
    try:
        origins = parse_origins(text)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None
    value = ", ".join(origins)
    before = await admin_origins()
    async with SandboxPolicy._meta.db.transaction():
        if await SandboxPolicy.exists():
            await SandboxPolicy.update(
                {SandboxPolicy.fetch_origins: value, SandboxPolicy.updated_at: now()}, force=True
            )
        else:
            await SandboxPolicy.insert(SandboxPolicy(fetch_origins=value, updated_at=now()))
    await audit.note("settings.fetch_origins", "job sandbox fetch origins", {"origins": before}, {"origins": value})


def origin_of(url: str, appliance_origin: str = "") -> str:
    """The URL's origin; a path (``/static/vendor/tfjs/tf.min.js``) is on the appliance."""
    if is_appliance_path(url):
        return appliance_origin
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.lower()}"


def is_appliance_path(url: str) -> bool:
    return url.startswith("/") and not url.startswith("//")


def disallowed_urls(urls: list[str], appliance_origin: str, allowed: list[str]) -> list[str]:
    """The URLs (job scripts, WebAssembly binaries) whose origin is neither the appliance nor allowed."""
    permitted = {appliance_origin, *allowed}
    return [url for url in urls if origin_of(url, appliance_origin) not in permitted]


def origins_digest(origins: list[str]) -> str:
    return hashlib.sha256("\n".join(origins).encode()).hexdigest()[:16]


def warm_sandbox_url(scripts: list[str], origins: list[str], *, cloud: bool) -> str:
    """The warm sandbox a run's tasks may use instead of starting a Web Worker from the run's script,
    or "" when the run's policy is not the warm sandbox's: its scripts come from elsewhere or it
    writes to a cloud bucket. The URL names the fetch origins the run got, so a warm sandbox started
    under another allow-list is never used for it (sandbox_routes.warm_sandbox)."""
    if cloud or not all(is_appliance_path(url) for url in scripts):
        return ""
    return f"/worker/sandbox.js?origins={origins_digest(origins)}"


# An origin as a Content-Security-Policy source may name it: nothing else may reach a policy.
_ORIGIN = re.compile(r"https?://(?:[a-z0-9.-]+|\[[0-9a-f:.]+\])(?::\d{1,5})?")


def is_origin(value: str) -> bool:
    return _ORIGIN.fullmatch(value) is not None


def frame_url(script_origins: list[str], connect_origins: list[str]) -> str:
    """The sandbox frame of a policy (sandbox_routes.frame): the origins beyond the appliance that its
    Web Workers may load scripts from and connect to. The frame is loaded without credentials, so its
    URL, not the caller, says what it is; one policy, one frame, whichever runs share it."""
    query = [("script", o) for o in dict.fromkeys(script_origins)] + [
        ("connect", o) for o in dict.fromkeys(connect_origins)
    ]
    return f"/worker/sandbox.html?{urlencode(query)}" if query else "/worker/sandbox.html"


def frame_policy(appliance_origin: str, script_origins: list[str], connect_origins: list[str]) -> str:
    """The Content-Security-Policy of a sandbox frame, which its Web Workers (started from blob: URLs
    of the frame) take on; only the worker page's origin may frame it. The appliance is named by its
    http(s) origin, which (unlike 'self', which an opaque origin matches nothing with) does not match
    its WebSocket: job code cannot open the worker protocol.

    'unsafe-eval' is allowed here, and only here (never on the dashboard's pages): job code is
    arbitrary code already, so eval gives it nothing new, while Emscripten's embind, TF.js bundles and
    many other libraries build functions from strings. The sandbox's boundary is that it holds no
    credentials (docs/sdk.md), and what the task may reach (connect-src, GET only, no importScripts)."""
    scripts = " ".join(dict.fromkeys([appliance_origin, *script_origins]))
    connect = " ".join(dict.fromkeys([appliance_origin, *connect_origins]))
    return (
        f"default-src 'none'; script-src {scripts} 'unsafe-eval' 'wasm-unsafe-eval'; worker-src blob:; "
        f"connect-src {connect}; base-uri 'none'; form-action 'none'; frame-ancestors {appliance_origin}"
    )
