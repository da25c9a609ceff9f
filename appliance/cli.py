"""The `peermr` command."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import getpass
import logging
import os
import sys
from pathlib import Path

from appliance import __version__
from appliance.audit import cli as audit_cli
from appliance.audit.context import command_line
from appliance.backup import cli as backup_cli
from appliance.billing import cli as billing_cli
from appliance.commands import CommandError, add_token_flags, command_settings, existing_store_settings, token_from
from appliance.config import DEFAULT_DATA_DIR, Settings
from appliance.data_dir import keep_private, warn_if_exposed
from appliance.errors import ServiceError
from appliance.jobs import cli as jobs_cli
from appliance.pmrfs import cli as pmrfs_cli

# Middle collections (each of ~7,000 new objects) before a full one may start: Python's default is 10.
GC_FULL_AFTER = 500


def _prepare_database(settings: Settings) -> None:
    from appliance import db

    db.configure(settings)
    asyncio.run(db.migrate())


def cmd_serve(args: argparse.Namespace) -> None:
    from appliance.fleet.protocol import MAX_BINARY_FRAME
    from appliance.server import GracefulServer, configure_logging, uvicorn_config

    settings = command_settings(args, role=args.server_role)
    configure_logging(settings)
    log = logging.getLogger("appliance.serve")
    role = "" if settings.role == "all" else f" as {settings.role}"
    log.info("PeerMR Appliance %s starting%s: data in %s", __version__, role, settings.data_path)
    warn_if_exposed(settings)
    app, drain, serving = _serving_app(settings)
    configure_logging(settings)  # again: building the app installed Litestar's handler
    # The modules and the app live as long as the server: out of the cyclic collector's sight, its
    # full collections walk only what requests and runs make. A full one over these ~180,000
    # objects stalled the event loop for ~0.1 s, about once per run or every few output downloads.
    gc.collect()
    gc.freeze()
    # What a connected worker holds (~80 objects a session) is walked by every full collection, and
    # Python starts one whenever 10 middle ones ran and a quarter more objects survived than the
    # last one found: a whole fleet saying hello to a new leader started one every ~1,000 hellos,
    # each longer than the last (0.5-1 s at 8,000 workers), half the leader's CPU while it took the
    # fleet back. At most one per ~3.5 M surviving objects (about a fleet of 40,000's) instead.
    gc.set_threshold(700, 10, GC_FULL_AFTER)

    def listening() -> None:
        serving()
        if settings.local_url == settings.base_url:
            log.info("serving: open %s/", settings.base_url)
        else:
            log.info("serving: open %s/ here, or %s/ from other machines", settings.local_url, settings.base_url)

    # Parameter-server values travel as binary WebSocket frames of up to MAX_BINARY_FRAME bytes.
    config = uvicorn_config(app, settings, ws_max_size=MAX_BINARY_FRAME)
    GracefulServer(config, lambda: drain(settings.shutdown_grace_seconds), listening).run()
    log.info("stopped")


def _serving_app(settings):
    """The ASGI app of this process's role, what SIGTERM drains, and what it does once it listens."""
    if settings.role == "edge":
        from appliance.cluster.edge_app import create_edge_app

        async def nothing_to_drain(_grace: float) -> None:
            return None

        return create_edge_app(settings), nothing_to_drain, lambda: None
    from appliance.app import create_app

    app = create_app(settings)
    return app, app.state.drain, app.state.serving


def cmd_migrate(args: argparse.Namespace) -> None:
    from appliance import db

    settings = command_settings(args)
    db.configure(settings)
    applied = asyncio.run(db.migrate())
    where = _store_name(settings)
    print(f"Applied {len(applied)} migration(s) to {where}." if applied else f"{where}: the database is up to date.")


def cmd_user_add(args: argparse.Namespace) -> None:
    from appliance.accounts import users

    settings = existing_store_settings(args)
    password = None
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise CommandError("no password on standard input")
    elif sys.stdin.isatty():
        password = getpass.getpass("Password (empty to generate one): ") or None
    _prepare_database(settings)
    account, generated = asyncio.run(users.create_user(args.email, args.role, password))
    print(f"Created {account.role} {account.email} in {_store_name(settings)}.")
    if generated:
        print(f"One-time password: {generated}  (to be changed at first sign-in)")


def _store_name(settings: Settings) -> str:
    return "the PostgreSQL database" if settings.uses_postgres else str(settings.data_path)


def cmd_token_create(args: argparse.Namespace) -> None:
    from appliance.accounts import api_tokens, users

    settings = existing_store_settings(args)
    _prepare_database(settings)

    async def create() -> str:
        account = await users.get_by_email(args.email)
        if account is None or not account.active:
            raise CommandError(f"no active account {args.email} in {_store_name(settings)}")
        _, token = await api_tokens.create(account.id, args.name)
        return token

    token = asyncio.run(create())
    # The token alone on stdout (for $(...)); where it was made, for the person, on stderr.
    print(f"API token for {args.email} in {_store_name(settings)}:", file=sys.stderr)
    print(token)


def cmd_worker(args: argparse.Namespace) -> None:
    from appliance.fleet.runner import run_workers

    token = token_from(args)
    server = args.server or os.environ.get("PEERMR_SERVER", "")
    if not server or not token:
        raise CommandError("--server and a token are required (PEERMR_SERVER, and PEERMR_TOKEN or --token-file)")
    data_dir = Path(args.data_dir or os.environ.get("PEERMR_DATA_DIR") or DEFAULT_DATA_DIR)
    keep_private()  # the browser profiles hold the workers' session cookies and PMRFS blobs
    run_workers(server, token, args.count, args.chromium, data_dir, args.gpu, args.ignore_busy)


def cmd_version(args: argparse.Namespace) -> None:
    print(f"peermr {__version__}")


def _data_dir_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="data directory (default ./peermr-data, env PEERMR_DATA_DIR)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="peermr", description="PeerMR Appliance")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the appliance")
    _data_dir_flag(serve)
    serve.add_argument("--host", help="address to listen on (default 0.0.0.0)")
    serve.add_argument("--port", type=int, help="HTTP port (default 8000)")
    serve.add_argument("--turn-port", type=int, help="TURN/STUN port, UDP and TCP (default 3478)")
    serve.add_argument("--public-url", help="the URL browsers use to reach the appliance")
    serve.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate chain (env PEERMR_TLS_CERT)")
    serve.add_argument("--tls-key", help="the certificate's PEM private key (env PEERMR_TLS_KEY)")
    serve.add_argument(
        "--role",
        dest="server_role",
        choices=["all", "scheduler", "edge"],
        help="all: the one-process appliance (default); scheduler or edge: past one machine, on PostgreSQL "
        "and Redis (env PEERMR_ROLE; docs/operations.md, Scale out)",
    )
    serve.set_defaults(func=cmd_serve)

    migrate = sub.add_parser("migrate", help="apply pending database migrations")
    _data_dir_flag(migrate)
    migrate.set_defaults(func=cmd_migrate)

    user = sub.add_parser("user", help="manage accounts").add_subparsers(
        dest="user_command", required=True, metavar="ACTION"
    )
    add = user.add_parser("add", help="create an account")
    add.add_argument("email")
    add.add_argument("--role", required=True, choices=["admin", "coordinator", "worker"])
    add.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    _data_dir_flag(add)
    add.set_defaults(func=cmd_user_add)

    token = sub.add_parser("token", help="manage API tokens").add_subparsers(
        dest="token_command", required=True, metavar="ACTION"
    )
    create = token.add_parser("create", help="create an API token for an account and print it")
    create.add_argument("email")
    create.add_argument("--name", default="CLI token", help="a name to recognise the token by")
    _data_dir_flag(create)
    create.set_defaults(func=cmd_token_create)

    worker = sub.add_parser("worker", help="run headless Chromium workers for an appliance")
    worker.add_argument("--server", help="the appliance's URL (env PEERMR_SERVER)")
    add_token_flags(worker, "an API token or an enrolment token")
    worker.add_argument("--count", type=int, default=1, help="how many browsers to run (default 1)")
    worker.add_argument("--chromium", help="path of the Chromium executable (default: found on the PATH)")
    worker.add_argument(
        "--gpu", action="store_true", help="give the browsers WebGPU (the GPU, or a software adapter without one)"
    )
    worker.add_argument(
        "--ignore-busy",
        action="store_true",
        help="keep working while the computer is busy (for a machine given over to the work; default: pause)",
    )
    _data_dir_flag(worker)
    worker.set_defaults(func=cmd_worker)

    pmrfs_cli.add_parser(sub)
    jobs_cli.add_parser(sub)
    billing_cli.add_parser(sub)
    audit_cli.add_parser(sub)
    backup_cli.add_parser(sub)

    version = sub.add_parser("version", help="print the version")
    version.set_defaults(func=cmd_version)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        # The appliance acts as itself (audit/context.py); any other command as whoever ran it.
        with contextlib.nullcontext() if args.func is cmd_serve else command_line():
            args.func(args)
    except ServiceError as exc:
        print(f"peermr: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        # Whoever read the output stopped (`peermr fs ls | head`): end quietly, as Unix tools do.
        # stdout goes to /dev/null so that flushing it at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)  # 128 + SIGPIPE, what a shell reports for a tool its pipe stopped
