"""The Cloud Data page: a coordinator's bucket settings, a connection test and the workers' CORS rule."""

from __future__ import annotations

from urllib.parse import urlsplit

import msgspec
from litestar import Request, get, post
from litestar.di import NamedDependency
from litestar.response import Response, Template

from appliance.accounts.auth import COORDINATOR, access
from appliance.accounts.forms import Form
from appliance.cloud import service
from appliance.cloud.validation import GCS_ENDPOINT, PROVIDER_NAMES, InvalidSettings
from appliance.config import Settings
from appliance.web.rendering import is_htmx, page, redirect

CLOUD = "/ui/cloud"
NOT_SAVED = "Save your bucket settings first."


class CloudForm(msgspec.Struct):
    provider: str = "s3"
    endpoint_url: str = ""
    region: str = ""
    bucket: str = ""
    access_key_id: str = ""
    # Never rendered back: the page only says whether one is saved.
    secret_access_key: str = ""


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def worker_origins(request: Request, settings: Settings) -> list[str]:
    """Where worker pages are loaded from: the appliance's public URL, and the address this page was opened at."""
    origins = [_origin(settings.base_url)]
    here = _origin(str(request.base_url))
    if here not in origins:
        origins.append(here)
    return origins


async def _page(
    request: Request,
    settings: Settings,
    *,
    status_code: int = 200,
    form: CloudForm | None = None,
    errors: dict[str, str] | None = None,
) -> Template:
    saved = await service.settings_of(request.app.state.cloud_keys, request.user.user_id)
    if form is None:
        form = (
            CloudForm(
                provider=saved.provider,
                endpoint_url=saved.endpoint_url,
                region=saved.region,
                bucket=saved.bucket,
                access_key_id=saved.access_key_id,
            )
            if saved
            else CloudForm()
        )
    origins = worker_origins(request, settings)
    return page(
        request,
        "cloud/cloud.html",
        status_code=status_code,
        saved=saved,
        form=form,
        errors=errors or {},
        # A secret typed into a refused form is not kept: say so, since the field comes back empty.
        secret_dropped=bool(errors) and bool(form.secret_access_key.strip()),
        providers=PROVIDER_NAMES,
        gcs_endpoint=GCS_ENDPOINT,
        origins=origins,
        gcs_cors=service.gcs_cors_json(origins),
    )


@get(CLOUD, opt=access(COORDINATOR), include_in_schema=False)
async def cloud_page(request: Request, settings: NamedDependency[Settings]) -> Template:
    return await _page(request, settings)


@post(CLOUD, opt=access(COORDINATOR), include_in_schema=False)
async def save_cloud_settings(request: Request, data: Form[CloudForm], settings: NamedDependency[Settings]) -> Response:
    try:
        saved = await service.save_settings(
            request.app.state.cloud_keys,
            request.user.user_id,
            provider=data.provider,
            endpoint_url=data.endpoint_url,
            region=data.region,
            bucket=data.bucket,
            access_key_id=data.access_key_id,
            secret_access_key=data.secret_access_key,
        )
    except InvalidSettings as exc:
        return await _page(request, settings, status_code=400, form=data, errors=exc.errors)
    return redirect(CLOUD, f"Cloud Data settings saved: {saved.provider_name}, bucket {saved.bucket}.")


def _result(request: Request, lines: list[tuple[str, str]]) -> Response:
    """An htmx request gets the result lines; a plain form post goes back to the page with them as a message."""
    if is_htmx(request):
        return page(request, "cloud/_result.html", lines=lines)
    level = "error" if any(level == "error" for level, _ in lines) else "success"
    return redirect(CLOUD, " ".join(text for _, text in lines), level)


async def _storage(request: Request) -> tuple[service.CloudStorage | None, str | None]:
    try:
        storage = await service.storage_for(request.app.state.cloud_keys, request.user.user_id)
    except service.SecretUnreadable as exc:
        return None, str(exc)
    return storage, None if storage else NOT_SAVED


async def _cors_lines(storage: service.CloudStorage, origins: list[str], fix: str) -> list[tuple[str, str]]:
    lines = []
    for origin in origins:
        problem = await service.check_worker_cors(storage, origin)
        if problem:
            lines.append(("error", f"{problem} {fix}"))
        else:
            lines.append(("success", f"Worker pages on {origin} may use its presigned URLs (CORS allows it)."))
    return lines


@post(f"{CLOUD}/test", opt=access(COORDINATOR), include_in_schema=False)
async def test_connection(request: Request, settings: NamedDependency[Settings]) -> Response:
    storage, problem = await _storage(request)
    if storage is not None:
        problem = await service.check_access(storage)
    if problem:
        return _result(request, [("error", f"Connection failed: {problem}")])
    fix = "Run the gcloud command below." if storage.provider == "gcs" else "Press Set CORS for workers."
    return _result(
        request,
        [
            ("success", f"Connected: bucket {storage.bucket} at {storage.where} answers to this key."),
            *await _cors_lines(storage, worker_origins(request, settings), fix),
        ],
    )


@post(f"{CLOUD}/cors", opt=access(COORDINATOR), include_in_schema=False)
async def set_cors(request: Request, settings: NamedDependency[Settings]) -> Response:
    storage, problem = await _storage(request)
    origins = worker_origins(request, settings)
    if storage is not None:
        problem = await service.set_worker_cors(storage, origins)
    if problem:
        return _result(request, [("error", f"CORS not set: {problem}")])
    # Some S3-compatible servers accept a CORS configuration and ignore it: ask the way a browser does.
    unheeded = [line for line in await _cors_lines(storage, origins, "") if line[0] == "error"]
    if unheeded:
        return _result(
            request,
            [("error", f"A CORS rule was put on bucket {storage.bucket}, but the server does not apply it:")]
            + [(level, text.strip()) for level, text in unheeded],
        )
    return _result(
        request,
        [
            (
                "success",
                f"CORS set on bucket {storage.bucket}: worker pages on {', '.join(origins)}"
                " may GET and PUT its objects.",
            )
        ],
    )


@post(f"{CLOUD}/remove", opt=access(COORDINATOR), include_in_schema=False)
async def remove_cloud_settings(request: Request) -> Response:
    if await service.remove_settings(request.user.user_id):
        return redirect(CLOUD, "Cloud Data settings removed; the appliance no longer holds your key.")
    return redirect(CLOUD, "There were no Cloud Data settings to remove.", "info")


ROUTES = [cloud_page, save_cloud_settings, test_connection, set_cors, remove_cloud_settings]
