"""Every JSON request body passes here before it is decoded (the app's ``request_class``).

Route handlers take JSON through Litestar's ``request.json()``; bounding it once covers the REST
API and the dashboard's JSON routes alike. A body over MAX_JSON_BYTES gets 413, one that nests
too deep 400, both answered as Litestar answers malformed JSON (``{"status_code", "detail"}``).
"""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.exceptions import SerializationException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge

from appliance.json_depth import TOO_DEEP, too_deep

# A job's script is at most 1 MiB (jobs/spec.py); escaped as a JSON string it can take up to three
# times that (non-ASCII written as \u escapes), and nothing else the API takes comes close.
MAX_JSON_BYTES = 4 * 1024 * 1024


class BoundedJSONRequest(Request):
    async def json(self) -> Any:
        body = await self.body()
        if len(body) > MAX_JSON_BYTES:
            raise RequestEntityTooLarge(detail=f"A JSON body may be at most {MAX_JSON_BYTES >> 20} MiB.")
        if too_deep(body):
            # Litestar answers this 400, with the message, as it does a body that is not JSON.
            raise SerializationException(f"{TOO_DEEP}.")
        return await super().json()
