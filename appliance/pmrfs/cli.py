"""`peermr fs`: PMRFS through the REST API of a running appliance.

    peermr fs mb BUCKET [--public]
    peermr fs ls [BUCKET[/PREFIX]]
    peermr fs put FILE BUCKET/KEY [--no-pin] [--content-type TYPE]
    peermr fs get BUCKET/KEY [FILE|-]
    peermr fs rm BUCKET/KEY | BUCKET [--force]
    peermr fs stat BUCKET/KEY

Every action takes --server URL (or PEERMR_SERVER) and an API token: PEERMR_TOKEN, --token-file FILE
or --token T (which shows in ps).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import mimetypes
import os
import sys
import urllib.parse
from pathlib import Path

from appliance.api_client import Api
from appliance.commands import CommandError, add_token_flags

CHUNK = 1024 * 1024


def _quote(key: str) -> str:
    return urllib.parse.quote(key, safe="/")


def _split(target: str, *, need_key: bool) -> tuple[str, str]:
    bucket, _, key = target.partition("/")
    if not bucket:
        raise CommandError(f"{target!r} does not name a bucket (BUCKET or BUCKET/KEY)")
    if need_key and not key:
        raise CommandError(f"{target!r} does not name an object (BUCKET/KEY)")
    return bucket, key


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}"
    return f"{n} B"


def _when(text: str) -> str:
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return text


def cmd_mb(api: Api, args: argparse.Namespace) -> None:
    bucket, _ = _split(args.bucket, need_key=False)
    api.request("PUT", f"/buckets/{bucket}", params={"private": "false" if args.public else "true"})
    print(f"created bucket {bucket}{' (shared fleet)' if args.public else ''}")


def cmd_ls(api: Api, args: argparse.Namespace) -> None:
    if not args.target:
        for b in api.request("GET", "/buckets").json():
            kind = "private" if b["private"] else "shared"
            print(
                f"{_when(b['created_at'])}  {kind:7}  {b['objects']:>6} objects  {_size(b['bytes']):>10}  {b['name']}"
            )
        return
    bucket, prefix = _split(args.target, need_key=False)
    for o in api.request("GET", f"/buckets/{bucket}/objects", params={"prefix": prefix}).json():
        flags = ("pinned" if o["pinned"] else "      ") + ("" if o["available"] else "  UNAVAILABLE")
        print(f"{_when(o['created_at'])}  {o['size']:>12}  {flags}  {o['key']}")


def cmd_put(api: Api, args: argparse.Namespace) -> None:
    bucket, key = _split(args.target, need_key=False)
    path = Path(args.file)
    if not path.is_file():
        raise CommandError(f"{args.file}: no such file")
    key = key or path.name
    if key.endswith("/"):
        key += path.name
    content_type = args.content_type or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    size = path.stat().st_size

    def body():
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                yield chunk

    response = api.request(
        "PUT",
        f"/buckets/{bucket}/objects/{_quote(key)}",
        params={"pin": "false" if args.no_pin else "true"},
        content=body(),
        headers={"Content-Type": content_type, "Content-Length": str(size)},
    )
    info = response.json()
    print(f"uploaded {bucket}/{info['key']} ({info['size']} bytes{', unpinned' if not info['pinned'] else ''})")


def cmd_get(api: Api, args: argparse.Namespace) -> None:
    bucket, key = _split(args.target, need_key=True)
    destination = args.file or key.rsplit("/", 1)[-1]
    with api.reaching(), api.client.stream("GET", f"/buckets/{bucket}/objects/{_quote(key)}") as response:
        if response.status_code >= 400:
            response.read()
            raise api.fail(response)
        expected = int(response.headers.get("content-length", "-1"))
        if destination == "-":
            received = 0
            out = sys.stdout.buffer
            for chunk in response.iter_bytes(CHUNK):
                out.write(chunk)
                received += len(chunk)
            out.flush()
        else:
            target = Path(destination)
            partial = target.with_name(target.name + ".part")
            received = 0
            try:
                with open(partial, "wb") as f:
                    for chunk in response.iter_bytes(CHUNK):
                        f.write(chunk)
                        received += len(chunk)
                if expected >= 0 and received != expected:
                    raise CommandError(f"download of {bucket}/{key} ended after {received} of {expected} bytes")
                os.replace(partial, target)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    partial.unlink()
    if expected >= 0 and received != expected:
        raise CommandError(f"download of {bucket}/{key} ended after {received} of {expected} bytes")
    if destination != "-":
        print(f"downloaded {bucket}/{key} to {destination} ({received} bytes)", file=sys.stderr)


def cmd_rm(api: Api, args: argparse.Namespace) -> None:
    bucket, key = _split(args.target, need_key=False)
    if key:
        api.request("DELETE", f"/buckets/{bucket}/objects/{_quote(key)}")
        print(f"deleted {bucket}/{key}")
    else:
        api.request("DELETE", f"/buckets/{bucket}", params={"force": "true" if args.force else "false"})
        print(f"deleted bucket {bucket}")


def cmd_stat(api: Api, args: argparse.Namespace) -> None:
    bucket, key = _split(args.target, need_key=True)
    print(json.dumps(api.request("GET", f"/objects-status/{bucket}/{_quote(key)}").json(), indent=2))


def _run(handler):
    def run(args: argparse.Namespace) -> None:
        api = Api(args)
        try:
            handler(api, args)
        finally:
            api.close()

    return run


def add_parser(sub) -> None:
    fs = sub.add_parser("fs", help="PMRFS buckets and objects on a running appliance").add_subparsers(
        dest="fs_command", required=True, metavar="ACTION"
    )

    def action(name: str, help: str, handler) -> argparse.ArgumentParser:
        p = fs.add_parser(name, help=help)
        p.add_argument("--server", help="the appliance's URL (env PEERMR_SERVER)")
        add_token_flags(p)
        p.set_defaults(func=_run(handler))
        return p

    mb = action("mb", "make a bucket", cmd_mb)
    mb.add_argument("bucket")
    mb.add_argument("--public", action="store_true", help="let any browser of the organisation hold its data")

    ls = action("ls", "list buckets, or the objects of BUCKET[/PREFIX]", cmd_ls)
    ls.add_argument("target", nargs="?", metavar="BUCKET[/PREFIX]")

    put = action("put", "upload FILE as BUCKET/KEY (KEY defaults to the file's name)", cmd_put)
    put.add_argument("file", metavar="FILE")
    put.add_argument("target", metavar="BUCKET/KEY")
    put.add_argument("--no-pin", action="store_true", help="let the appliance drop its copy once browsers hold enough")
    put.add_argument("--content-type", help="default: guessed from the file name")

    get = action("get", "download BUCKET/KEY to FILE (default: the key's last part; - for stdout)", cmd_get)
    get.add_argument("target", metavar="BUCKET/KEY")
    get.add_argument("file", nargs="?", metavar="FILE|-")

    rm = action("rm", "delete BUCKET/KEY, or the bucket BUCKET", cmd_rm)
    rm.add_argument("target", metavar="BUCKET/KEY|BUCKET")
    rm.add_argument("--force", action="store_true", help="delete a bucket together with its objects")

    stat = action("stat", "print where the blobs of BUCKET/KEY are, as JSON", cmd_stat)
    stat.add_argument("target", metavar="BUCKET/KEY")
