"""The worker page employees leave open, and the live fleet view."""

from __future__ import annotations

import time

from litestar import Request, get, post
from litestar.params import FromPath
from litestar.response import Response, Template

from appliance.accounts.auth import ADMIN, USER, WORKER_BROWSER, access
from appliance.fleet import protocol as p
from appliance.fleet.connection import CLOSE_GONE
from appliance.fleet.registry import Fleet, Worker
from appliance.web.rendering import is_htmx, page, redirect


def _fleet(request: Request) -> Fleet:
    return request.app.state.fleet


@get("/worker", opt=access(WORKER_BROWSER), include_in_schema=False)
async def worker_page(request: Request) -> Template:
    return page(request, "fleet/worker.html", account_email=request.user.email, enrolled=request.user.via == "worker")


def _browser(user_agent: str) -> str:
    for marker, name in (
        ("Edg/", "Edge"),
        ("OPR/", "Opera"),
        ("Firefox/", "Firefox"),
        ("Chrome/", "Chrome"),
        ("Safari/", "Safari"),
    ):
        if marker in user_agent:
            version = user_agent.split(marker, 1)[1].split(" ", 1)[0].split(".", 1)[0]
            return f"{name} {version}"
    return user_agent[:40] or "unknown"


def _milliseconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.1f} ms" if value < 10 else f"{value:.0f} ms"


def _row(worker: Worker) -> dict:
    caps = worker.capabilities
    gpu = caps.gpu
    return {
        "id": worker.worker_id,
        "account": worker.account_email,
        "browser": _browser(caps.user_agent),
        "cores": caps.cores,
        "memory": f"{caps.memory_gib:g} GiB" if caps.memory_gib else "—",
        "gpu": " ".join(v for v in (gpu.info.get("vendor"), gpu.info.get("architecture")) if v) or "WebGPU"
        if gpu
        else "none",
        "visibility": caps.visibility,
        "connectivity": worker.connectivity or "not probed",
        "rtt": _milliseconds(worker.probe_rtt_ms if worker.probe_rtt_ms is not None else worker.rtt_ms),
        "state": worker.state,
        "blobs": worker.blobs,
        "bytes_held": worker.bytes_held,
        "age": int(time.time() - worker.connected_at),
        # Reliability from past runs (fleet/reliability.py); workers are chosen highest first.
        "score": f"{worker.score:.1f}",
    }


def _context(request: Request) -> dict:
    workers = _fleet(request).visible_to(request.user.user_id, request.user.is_admin)
    return {"workers": [_row(w) for w in workers], "can_disconnect": request.user.is_admin}


@get("/ui/workers", opt=access(USER), include_in_schema=False)
async def workers_page(request: Request) -> Template:
    return page(request, "fleet/workers.html", **_context(request))


@get("/ui/workers/live", opt=access(USER), include_in_schema=False)
async def workers_live(request: Request) -> Template:
    return page(request, "fleet/_workers_table.html", **_context(request))


@post("/ui/workers/{worker_id:str}/disconnect", opt=access(ADMIN), include_in_schema=False)
async def disconnect_worker(request: Request, worker_id: FromPath[str]) -> Response:
    worker = _fleet(request).get(worker_id)
    if worker is None:
        return redirect("/ui/workers", "That worker has already left.", "info")
    await worker.send(p.Disconnect(reason="disconnected by an administrator", reconnect=False))
    await worker.close(CLOSE_GONE, "disconnected by an administrator")
    _fleet(request).remove(worker)
    if is_htmx(request):
        return page(request, "fleet/_workers_table.html", **_context(request))
    return redirect("/ui/workers", f"Worker {worker_id} of {worker.account_email} is disconnected.")


ROUTES = [worker_page, workers_page, workers_live, disconnect_worker]
