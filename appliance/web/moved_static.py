"""Static files that moved answer at their old URLs with a permanent redirect to where they are now.

Jobs name the appliance's scripts in ``execution.scripts`` by URL, and jobs already written keep the
old ones: the worker page and the job sandbox fetch them, and both follow the redirect. Static files
are read across origins by the sandbox (web/static_cache.py), so the redirect allows that too.
"""

from __future__ import annotations

from litestar import get
from litestar.response import Redirect

from appliance.accounts.auth import PUBLIC, access

# Old path -> new path.
MOVED = {
    # The appliance's own TF.js add-on left static/vendor/, which holds third-party code only.
    "/static/vendor/tfjs/tf-data-parallel.js": "/static/jobs/tf-data-parallel.js",
}


def _redirect(old: str, new: str):
    @get(old, opt=access(PUBLIC), include_in_schema=False, name=f"moved:{old}")
    async def moved() -> Redirect:
        return Redirect(new, status_code=301, headers={"access-control-allow-origin": "*"})

    return moved


ROUTES = [_redirect(old, new) for old, new in MOVED.items()]
