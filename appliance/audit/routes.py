"""Admin → Audit log: the entries with filters, their CSV export and the retention setting."""

from __future__ import annotations

import msgspec
from litestar import Request, get, post
from litestar.params import FromQuery
from litestar.response import Response, Stream, Template

from appliance.accounts.auth import ADMIN, access
from appliance.accounts.forms import Form
from appliance.audit import service
from appliance.audit.service import Filters
from appliance.errors import ServiceError
from appliance.web.rendering import page, redirect

AUDIT = "/ui/admin/audit"


class RetentionForm(msgspec.Struct):
    retention_days: str = ""


async def _page(
    request: Request,
    filters: Filters,
    *,
    status_code: int = 200,
    error: str | None = None,
    retention: str | None = None,
) -> Template:
    try:
        found = await service.entries(filters)
    except ServiceError as exc:
        found, error, status_code = [], str(exc), exc.status
    ends = await service.chain_state()
    return page(
        request,
        "audit/audit.html",
        status_code=status_code,
        entries=found,
        filters=filters,
        actions=await service.actions(),
        chain=ends,
        retention=retention
        if retention is not None
        else ("" if ends["retention_days"] is None else str(ends["retention_days"])),
        error=error,
        query=str(request.url.query or ""),
    )


@get(AUDIT, opt=access(ADMIN), include_in_schema=False)
async def audit_page(
    request: Request,
    actor: FromQuery[str] = "",
    action: FromQuery[str] = "",
    target: FromQuery[str] = "",
    since: FromQuery[str] = "",
    until: FromQuery[str] = "",
) -> Template:
    return await _page(request, Filters(actor, action, target, since, until))


@get(f"{AUDIT}.csv", opt=access(ADMIN), include_in_schema=False)
async def audit_csv(
    actor: FromQuery[str] = "",
    action: FromQuery[str] = "",
    target: FromQuery[str] = "",
    since: FromQuery[str] = "",
    until: FromQuery[str] = "",
) -> Response:
    try:
        batches = service.export_csv(Filters(actor, action, target, since, until))
    except ServiceError as exc:
        return Response(str(exc) + "\n", status_code=exc.status, media_type="text/plain; charset=utf-8")
    return Stream(
        batches,
        media_type="text/csv; charset=utf-8",
        headers={"content-disposition": 'attachment; filename="peermr-audit.csv"'},
    )


@post(f"{AUDIT}/retention", opt=access(ADMIN), include_in_schema=False)
async def save_retention(request: Request, data: Form[RetentionForm]) -> Response:
    try:
        days = await service.set_retention(data.retention_days)
    except ServiceError as exc:
        return await _page(request, Filters(), status_code=exc.status, error=str(exc), retention=data.retention_days)
    return redirect(AUDIT, f"Entries are kept for {days} days." if days else "Every entry is kept.")


ROUTES = [audit_page, audit_csv, save_retention]
