"""The dashboard's Storage page: buckets, objects, where their blobs are, upload and download."""

from __future__ import annotations

import hmac
import urllib.parse
from collections.abc import AsyncIterator

import msgspec
from litestar import Request, get, post
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException, PermissionDeniedException
from litestar.middleware.csrf import CSRF_SECRET_LENGTH, generate_csrf_hash
from litestar.params import FromPath, FromQuery
from litestar.response import Response, Stream, Template
from multipart import MultipartSegment, ParserError, PushMultipartParser

from appliance.accounts.actor import Actor
from appliance.accounts.auth import COORDINATOR, access
from appliance.accounts.forms import Form
from appliance.config import Settings
from appliance.errors import InvalidRequest, NotFound, ServiceError
from appliance.pmrfs import service
from appliance.pmrfs.api_routes import object_key
from appliance.pmrfs.names import RUNS_BUCKET_PREFIX, check_key
from appliance.web.errors import CSRF_FAILURE
from appliance.web.formatting import human_bytes
from appliance.web.rendering import is_htmx, page, redirect

STORAGE = "/ui/storage"
# Form fields other than the file are short; anything longer is refused.
MAX_FIELD_BYTES = 4096
# Room for the multipart envelope around the file when comparing Content-Length with the limit.
MULTIPART_OVERHEAD = 64 * 1024


def bucket_url(bucket: str) -> str:
    return f"{STORAGE}/buckets/{bucket}"


def _q(key: str) -> str:
    return urllib.parse.quote(key, safe="/")


class BucketForm(msgspec.Struct):
    name: str = ""
    private: str = ""


class ObjectForm(msgspec.Struct):
    key: str = ""
    pinned: str = ""
    prefix: str = ""


class BucketDeleteForm(msgspec.Struct):
    force: str = ""


async def _storage_page(request: Request, *, status_code: int = 200, error: str | None = None, form=None) -> Template:
    actor = Actor.of(request.user)
    return page(
        request,
        "pmrfs/storage.html",
        status_code=status_code,
        buckets=await service.list_buckets(actor),
        error=error,
        form=form or BucketForm(private="true"),
        show_owner=actor.is_admin,
        runs_prefix=RUNS_BUCKET_PREFIX,
    )


@get(STORAGE, opt=access(COORDINATOR), include_in_schema=False)
async def storage_page(request: Request) -> Template:
    return await _storage_page(request)


@post(f"{STORAGE}/buckets", opt=access(COORDINATOR), include_in_schema=False)
async def create_bucket(request: Request, data: Form[BucketForm]) -> Response:
    name = data.name.strip()
    try:
        await service.create_bucket(Actor.of(request.user), name, private=data.private == "true")
    except ServiceError as exc:
        return await _storage_page(request, status_code=exc.status, error=str(exc), form=data)
    return redirect(bucket_url(name), f"Bucket {name} created.")


@post(f"{STORAGE}/buckets/{{bucket:str}}/delete", opt=access(COORDINATOR), include_in_schema=False)
async def delete_bucket(request: Request, bucket: FromPath[str], data: Form[BucketDeleteForm]) -> Response:
    try:
        count = await service.delete_bucket(
            Actor.of(request.user), bucket, request.app.state.store, force=data.force == "true"
        )
    except NotFound:
        raise  # the 404 page, as web.errors.service_error shows it
    except ServiceError as exc:
        return _to_storage(request, str(exc), "error")
    with_objects = f" with its {count} object{'s' if count != 1 else ''}" if count else ""
    return _to_storage(request, f"Bucket {bucket} deleted{with_objects}.")


def _to_storage(request: Request, message: str, level: str = "success") -> Response:
    """Back to the bucket list; an htmx request is told to load it (with the message) itself."""
    response = redirect(STORAGE, message, level)
    if is_htmx(request):
        return Response(content="", status_code=200, headers={"HX-Redirect": STORAGE}, cookies=response.cookies)
    return response


async def _objects_context(request: Request, bucket: str, prefix: str) -> dict:
    actor = Actor.of(request.user)
    info = await service.get_bucket(actor, bucket)
    objects = await service.list_objects(actor, bucket, request.app.state.live_holders, prefix)
    return {"bucket": info, "objects": objects, "prefix": prefix, "quote": _q}


async def _objects_partial(request: Request, bucket: str, prefix: str, message: tuple[str, str]) -> Template:
    """The objects panel after an htmx action, with the message shown where the page shows messages."""
    context = await _objects_context(request, bucket, prefix)
    return page(request, "pmrfs/_objects.html", **context, oob_flashes=[message])


@get(f"{STORAGE}/buckets/{{bucket:str}}", opt=access(COORDINATOR), include_in_schema=False)
async def bucket_page(
    request: Request, bucket: FromPath[str], settings: NamedDependency[Settings], prefix: FromQuery[str] = ""
) -> Template:
    context = await _objects_context(request, bucket, prefix)
    return page(request, "pmrfs/bucket.html", **context, max_upload=settings.pmrfs_max_upload_bytes)


async def _after_change(request: Request, bucket: str, prefix: str, message: str, level: str = "success") -> Response:
    if is_htmx(request):
        try:
            return await _objects_partial(request, bucket, prefix, (level, message))
        except NotFound:
            return page(request, "_flash_oob.html", flashes=[(level, message)])
    target = bucket_url(bucket) + (f"?prefix={urllib.parse.quote(prefix)}" if prefix else "")
    return redirect(target, message, level)


@post(f"{STORAGE}/buckets/{{bucket:str}}/objects/delete", opt=access(COORDINATOR), include_in_schema=False)
async def delete_object(request: Request, bucket: FromPath[str], data: Form[ObjectForm]) -> Response:
    try:
        await service.delete_object(Actor.of(request.user), bucket, data.key, request.app.state.store)
    except NotFound:
        raise  # the 404 page, as web.errors.service_error shows it
    except ServiceError as exc:
        return await _after_change(request, bucket, data.prefix, str(exc), "error")
    return await _after_change(request, bucket, data.prefix, f"Deleted {data.key}.")


@post(f"{STORAGE}/buckets/{{bucket:str}}/objects/pin", opt=access(COORDINATOR), include_in_schema=False)
async def pin_object(request: Request, bucket: FromPath[str], data: Form[ObjectForm]) -> Response:
    pinned = data.pinned == "true"
    state = request.app.state
    try:
        await service.set_pinned(Actor.of(request.user), bucket, data.key, pinned, state.store, state.live_holders)
    except NotFound:
        raise  # the 404 page, as web.errors.service_error shows it
    except ServiceError as exc:
        return await _after_change(request, bucket, data.prefix, str(exc), "error")
    what = "keeps its copy on the appliance" if pinned else "may leave the appliance once browsers hold enough copies"
    return await _after_change(request, bucket, data.prefix, f"{data.key} {what}.")


@get(f"{STORAGE}/object/{{bucket:str}}/{{key:path}}", opt=access(COORDINATOR), include_in_schema=False)
async def object_page(request: Request, bucket: FromPath[str], key: FromPath[str]) -> Template:
    try:
        status = await service.object_status(
            Actor.of(request.user),
            bucket,
            object_key(request, f"{STORAGE}/object/{bucket}/", key),
            request.app.state.live_holders,
        )
    except ServiceError as exc:
        raise NotFoundException(str(exc)) from None
    return page(request, "pmrfs/object.html", status=status, quote=_q)


def _attachment(key: str) -> str:
    name = key.rsplit("/", 1)[-1]
    fallback = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in name)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{urllib.parse.quote(name, safe='')}"


@get(f"{STORAGE}/download/{{bucket:str}}/{{key:path}}", opt=access(COORDINATOR), include_in_schema=False)
async def download(request: Request, bucket: FromPath[str], key: FromPath[str]) -> Response:
    key = object_key(request, f"{STORAGE}/download/{bucket}/", key)
    state = request.app.state
    try:
        download = await service.open_object(Actor.of(request.user), bucket, key, state.store, state.live_holders)
    except NotFound:
        raise  # the 404 page, as web.errors.service_error shows it
    except ServiceError as exc:
        return redirect(bucket_url(bucket), str(exc), "error")
    return Stream(
        content=download.content,
        media_type=download.info.content_type,
        headers={**download.headers(), "content-disposition": _attachment(key)},
    )


# -- upload -----------------------------------------------------------------------------------


def csrf_token_valid(request: Request, token: str | None) -> bool:
    """Litestar's double-submit check: the token sent matches the csrftoken cookie, both signed by us."""
    config = request.app.csrf_config
    cookie = request.cookies.get(config.cookie_name)
    if not token or not cookie:
        return False

    def decode(value: str) -> str | None:
        if len(value) < CSRF_SECRET_LENGTH + 1:
            return None
        secret, signature = value[:CSRF_SECRET_LENGTH], value[CSRF_SECRET_LENGTH:]
        return secret if hmac.compare_digest(signature, generate_csrf_hash(secret, config.secret)) else None

    sent, expected = decode(token), decode(cookie)
    return sent is not None and expected is not None and hmac.compare_digest(sent, expected)


class FormUpload:
    """A multipart form read as it arrives: short fields first, then the file, streamed.

    The CSRF token must arrive before the file (the x-csrftoken header, or the ``_csrf_token``
    field, which the form puts first), so nothing is written for a forged request.
    """

    def __init__(self, request: Request, boundary: str):
        self.request = request
        self.boundary = boundary
        self.fields: dict[str, str] = {}
        self.filename: str | None = None
        self.content_type: str | None = None
        self.csrf_checked = csrf_token_valid(request, request.headers.get("x-csrftoken"))

    def _file_starts(self, segment: MultipartSegment) -> None:
        if self.filename is not None:
            raise InvalidRequest("Upload one file at a time.")
        if not self.csrf_checked and not csrf_token_valid(self.request, self.fields.get("_csrf_token")):
            raise PermissionDeniedException(CSRF_FAILURE)
        if not segment.filename:
            raise InvalidRequest("Choose a file to upload.")
        self.filename = segment.filename
        self.content_type = segment.content_type
        check_key(self.key)

    @property
    def key(self) -> str:
        return self.fields.get("key", "").strip() or (self.filename or "")

    async def file_chunks(self) -> AsyncIterator[bytes]:
        parser = PushMultipartParser(self.boundary, max_header_count=8, max_segment_count=16)
        field: str | None = None
        value = bytearray()
        in_file = False
        try:
            async for chunk in self.request.stream():
                for event in parser.parse(chunk):
                    if isinstance(event, MultipartSegment):
                        if event.filename is not None:
                            self._file_starts(event)
                            in_file = True
                        else:
                            field, value = event.name or "", bytearray()
                    elif event is None:
                        if in_file:
                            in_file = False
                        elif field is not None:
                            self.fields[field] = value.decode("utf-8", "replace")
                            field = None
                    elif in_file:
                        yield bytes(event)
                    else:
                        value += event
                        if len(value) > MAX_FIELD_BYTES:
                            raise InvalidRequest(f"The form field {field!r} is too long.")
            parser.close()
        except ParserError as exc:
            raise InvalidRequest(f"The upload is not a well-formed form: {exc}") from None
        if self.filename is None:
            raise InvalidRequest("Choose a file to upload.")


def _boundary(request: Request) -> str | None:
    media_type, options = request.content_type
    if media_type != "multipart/form-data":
        return None
    return options.get("boundary") or None


@post(
    f"{STORAGE}/buckets/{{bucket:str}}/upload",
    opt={**access(COORDINATOR), "exclude_from_csrf": True},  # checked by FormUpload before any byte is stored
    include_in_schema=False,
    request_max_body_size=None,
)
async def upload(request: Request, bucket: FromPath[str], settings: NamedDependency[Settings]) -> Response:
    actor = Actor.of(request.user)
    store = request.app.state.store
    max_bytes = settings.pmrfs_max_upload_bytes
    boundary = _boundary(request)
    form: FormUpload | None = None
    try:
        declared = request.content_length
        await service.check_upload(
            actor, bucket, None, None if declared is None else max(0, declared - MULTIPART_OVERHEAD), max_bytes
        )
        if boundary is None:
            raise InvalidRequest("Upload a file with the form on the bucket page.")
        form = FormUpload(request, boundary)
        ingest = service.Ingest(store, max_bytes)
        try:
            await ingest.consume(form.file_chunks())
            info = await service.commit_object(
                actor,
                bucket,
                form.key,
                ingest,
                content_type=form.content_type,
                pinned=form.fields.get("pin") == "true",
            )
        except BaseException:
            await ingest.discard()
            raise
    except NotFound as exc:
        if is_htmx(request):
            return page(request, "_flash_oob.html", flashes=[("error", str(exc))])
        raise  # the 404 page, as web.errors.service_error shows it
    except ServiceError as exc:
        prefix = form.fields.get("prefix", "") if form else ""
        return await _after_change(request, bucket, prefix, str(exc), "error")
    prefix = form.fields.get("prefix", "")
    return await _after_change(request, bucket, prefix, f"Uploaded {info.key} ({human_bytes(info.size)}).")


ROUTES = [
    storage_page,
    create_bucket,
    delete_bucket,
    bucket_page,
    delete_object,
    pin_object,
    object_page,
    download,
    upload,
]
