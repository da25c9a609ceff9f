"""HTTP blob endpoints for worker browsers, each call authorized by a grant the appliance issued."""

from __future__ import annotations

from litestar import Request, get, put
from litestar.exceptions import NotFoundException, PermissionDeniedException
from litestar.params import FromPath
from litestar.response import Response

from appliance.accounts.auth import WORKER_BROWSER, access
from appliance.pmrfs.blobstore import BLOB_SIZE, SHA256_RE
from appliance.pmrfs.datanodes import DataNodes


def _authorize(request: Request, op: str, sha256: str) -> tuple[DataNodes, str]:
    datanodes: DataNodes = request.app.state.datanodes
    params = request.query_params
    worker_id = params.get("worker", "")
    try:
        expires = int(params.get("expires", "0"))
    except ValueError:
        expires = 0
    worker = datanodes.fleet.get(worker_id)
    if (
        not SHA256_RE.match(sha256)
        or params.get("op") != op
        or worker is None
        or worker.account_id != request.user.user_id
        or not datanodes.grants.check(op, sha256, worker_id, expires, params.get("grant", ""))
    ):
        raise PermissionDeniedException("No valid grant for this blob.")
    return datanodes, worker_id


@get("/pmrfs/blobs/{sha256:str}", opt=access(WORKER_BROWSER), include_in_schema=False)
async def fetch_blob(request: Request, sha256: FromPath[str]) -> Response:
    datanodes, _ = _authorize(request, "fetch", sha256)
    data = await datanodes.store.get(sha256)
    if data is None:
        raise NotFoundException("The appliance no longer has this blob.")
    return Response(data, media_type="application/octet-stream", headers={"Cache-Control": "no-store"})


@put(
    "/pmrfs/blobs/{sha256:str}",
    opt={**access(WORKER_BROWSER), "exclude_from_csrf": True},
    include_in_schema=False,
    request_max_body_size=BLOB_SIZE,
    status_code=204,
)
async def upload_blob(request: Request, sha256: FromPath[str]) -> None:
    # CSRF does not apply: the grant in the URL is the per-request secret a foreign page cannot know.
    datanodes, worker_id = _authorize(request, "upload", sha256)
    if not datanodes.uploaded(sha256, worker_id, await request.body()):
        raise PermissionDeniedException("This blob was not asked for, or its bytes do not match its SHA-256.")


ROUTES = [fetch_blob, upload_blob]
