"""PMRFS in the REST API: buckets and objects (see docs/protocol.md)."""

from __future__ import annotations

import urllib.parse

from litestar import Request, delete, get, put
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery
from litestar.response import Stream
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT

from appliance.accounts.actor import Actor
from appliance.accounts.auth import COORDINATOR, USER, access
from appliance.config import Settings
from appliance.pmrfs import service
from appliance.pmrfs.service import BucketInfo, ObjectInfo, ObjectStatus

TAGS = ["pmrfs"]


def object_key(request: Request, prefix: str, key: str) -> str:
    """The key exactly as the client sent it, after ``prefix`` in the request's path.

    Routing collapses "//" and drops a trailing "/" in the ``{key:path}`` parameter, which would
    quietly store an object under another key; the raw path keeps them, so such keys are refused.
    """
    raw = request.scope.get("raw_path")
    if raw:
        path = urllib.parse.unquote(raw.decode("latin-1"), errors="surrogateescape")
        if path.startswith(prefix):
            return path[len(prefix) :]
    return key[1:] if key.startswith("/") else key


@put(
    "/api/v1/buckets/{bucket:str}",
    opt=access(COORDINATOR),
    status_code=HTTP_201_CREATED,
    tags=TAGS,
    summary="Create a bucket",
    description="Names follow S3's rules and are unique across all accounts; at most 20 per account. "
    "A private bucket (the default) keeps its data in its owner's browsers only.",
)
async def create_bucket(request: Request, bucket: FromPath[str], private: FromQuery[bool] = True) -> BucketInfo:
    return await service.create_bucket(Actor.of(request.user), bucket, private)


@get("/api/v1/buckets", opt=access(USER), tags=TAGS, summary="Your buckets (an admin sees all)")
async def list_buckets(request: Request) -> list[BucketInfo]:
    return await service.list_buckets(Actor.of(request.user))


@delete(
    "/api/v1/buckets/{bucket:str}",
    opt=access(USER),
    status_code=HTTP_204_NO_CONTENT,
    tags=TAGS,
    summary="Delete a bucket",
    description="409 when it still has objects, unless force=true deletes them too.",
)
async def delete_bucket(request: Request, bucket: FromPath[str], force: FromQuery[bool] = False) -> None:
    await service.delete_bucket(Actor.of(request.user), bucket, request.app.state.store, force=force)


@put(
    "/api/v1/buckets/{bucket:str}/objects/{key:path}",
    opt=access(USER),
    status_code=HTTP_201_CREATED,
    tags=TAGS,
    summary="Upload an object (the body is its bytes)",
    description="The body is streamed into blobs of at most 4 MiB; its Content-Type is kept. "
    "pin=true (default) keeps the appliance's copy; pin=false lets it go once browsers hold the "
    "replication factor. 413 above pmrfs_max_upload_bytes, with nothing stored.",
    request_max_body_size=None,
)
async def put_object(
    request: Request,
    bucket: FromPath[str],
    key: FromPath[str],
    settings: NamedDependency[Settings],
    pin: FromQuery[bool] = True,
) -> ObjectInfo:
    return await service.put_object(
        Actor.of(request.user),
        bucket,
        object_key(request, f"/api/v1/buckets/{bucket}/objects/", key),
        request.stream(),
        request.app.state.store,
        max_bytes=settings.pmrfs_max_upload_bytes,
        content_type=request.headers.get("content-type"),
        pinned=pin,
        declared_size=request.content_length,
    )


@get(
    "/api/v1/buckets/{bucket:str}/objects/{key:path}",
    opt=access(USER),
    tags=TAGS,
    summary="Download an object",
    description="503 when some blob of the object has no live replica.",
)
async def get_object(request: Request, bucket: FromPath[str], key: FromPath[str]) -> Stream:
    download = await service.open_object(
        Actor.of(request.user),
        bucket,
        object_key(request, f"/api/v1/buckets/{bucket}/objects/", key),
        request.app.state.store,
        request.app.state.live_holders,
    )
    return Stream(content=download.content, media_type=download.info.content_type, headers=download.headers())


@get("/api/v1/buckets/{bucket:str}/objects", opt=access(USER), tags=TAGS, summary="List objects")
async def list_objects(request: Request, bucket: FromPath[str], prefix: FromQuery[str] = "") -> list[ObjectInfo]:
    return await service.list_objects(Actor.of(request.user), bucket, request.app.state.live_holders, prefix)


@delete(
    "/api/v1/buckets/{bucket:str}/objects/{key:path}",
    opt=access(USER),
    status_code=HTTP_204_NO_CONTENT,
    tags=TAGS,
    summary="Delete an object",
)
async def delete_object(request: Request, bucket: FromPath[str], key: FromPath[str]) -> None:
    await service.delete_object(
        Actor.of(request.user),
        bucket,
        object_key(request, f"/api/v1/buckets/{bucket}/objects/", key),
        request.app.state.store,
    )


@get(
    "/api/v1/objects-status/{bucket:str}/{key:path}",
    opt=access(USER),
    tags=TAGS,
    summary="Where an object's blobs are",
    description='Size, availability, pinning, and per blob the holders that can deliver it now ("appliance" '
    "for the appliance's disk, otherwise worker ids) and those recorded but offline.",
)
async def object_status(request: Request, bucket: FromPath[str], key: FromPath[str]) -> ObjectStatus:
    return await service.object_status(
        Actor.of(request.user),
        bucket,
        object_key(request, f"/api/v1/objects-status/{bucket}/", key),
        request.app.state.live_holders,
    )


ROUTES = [
    create_bucket,
    list_buckets,
    delete_bucket,
    put_object,
    get_object,
    list_objects,
    delete_object,
    object_status,
]
