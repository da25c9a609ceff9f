"""Headers of static files: caching (versioned URLs for a year, the rest revalidated), and CORS.

Templates and the job sandbox script name static files with ``?v=<version>`` (the ``asset()``
global), so such a URL never changes content until an upgrade changes the URL: browsers may keep
it without asking again, which spares every task's Web Worker two requests. Files reached
without the version (the ES modules the worker page imports relatively) are revalidated, so an
upgrade never mixes old and new code.

Static files are public, and the job sandbox reads them from an opaque origin (a WebAssembly
binary, TF.js's .wasm files, a job's example data), which needs them readable across origins. They
are read without credentials, so ``*`` lets no page read anything a stranger could not.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from litestar.datastructures import MutableScopeHeaders
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from appliance import __version__

IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"


class StaticCacheMiddleware(ASGIMiddleware):
    scopes = (ScopeType.HTTP,)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        if not scope["path"].startswith("/static/"):
            await next_app(scope, receive, send)
            return
        versioned = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("v") == [__version__]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 200:
                headers = MutableScopeHeaders.from_message(message)
                headers["cache-control"] = IMMUTABLE if versioned else REVALIDATE
                headers["access-control-allow-origin"] = "*"
            await send(message)

        await next_app(scope, receive, send_wrapper)
