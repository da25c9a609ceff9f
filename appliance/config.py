"""Typed settings.

Precedence, lowest to highest: built-in defaults, ``<data-dir>/peermr.toml``,
``PEERMR_*`` environment variables, command-line flags. Every setting has a
working default so a first start needs no configuration at all.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import tomllib
from pathlib import Path
from typing import Annotated, Any, get_args, get_type_hints
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec

from appliance.errors import ServiceError

ENV_PREFIX = "PEERMR_"
CONFIG_FILE_NAME = "peermr.toml"
DEFAULT_DATA_DIR = "./peermr-data"
WILDCARD_HOSTS = {"0.0.0.0", "::", ""}


class ConfigError(ServiceError):
    """A setting is malformed; the message says which and why (`peermr` prints it and exits)."""


# msgspec enforces these ranges as the settings are loaded; _explain tells a value outside one with
# the whole range and the description.
Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]
RelayPort = Annotated[int, msgspec.Meta(ge=1024, le=65535)]
Positive = Annotated[int, msgspec.Meta(ge=1)]
NotNegative = Annotated[int, msgspec.Meta(ge=0)]
MinutesInADay = Annotated[int, msgspec.Meta(ge=1, le=24 * 60, description="1440 minutes is a day")]
RateLimit = Annotated[int, msgspec.Meta(ge=0, description="0 turns the limit off")]


class Settings(msgspec.Struct, kw_only=True, frozen=True):
    data_dir: str = DEFAULT_DATA_DIR
    host: str = "0.0.0.0"
    port: Port = 8000
    turn_port: Port = 3478
    # The address employees' browsers and API clients use; derived when empty.
    public_url: str = ""
    # Empty means SQLite at <data-dir>/peermr.sqlite3; a postgresql:// URL switches engines.
    database_url: str = ""
    # Past one machine (docs/operations.md, "Scale out"): "all" is the one-process appliance;
    # "scheduler" and "edge" share PostgreSQL and pass worker messages over Redis (redis_url).
    role: str = "all"
    redis_url: str = ""
    # Where edges reach this scheduler (default http://<host name>:<port>); a scheduler only.
    advertise_url: str = ""
    # The host name browsers reach this process's TURN listener at (default: public_url's host).
    turn_host: str = ""
    admin_email: str = ""
    admin_password: str = ""
    turn_secret: str = ""
    turn_realm: str = "peermr"
    # Relay ports handed to allocations (RFC 8656 recommends the dynamic range).
    turn_min_port: RelayPort = 49152
    turn_max_port: RelayPort = 65535
    # The relay reaches only the addresses connected workers announced as ICE candidates; these
    # comma-separated CIDRs add peers (even loopback) and refuse peers (whoever announced them).
    turn_allowed_peers: str = ""
    turn_denied_peers: str = ""
    # A disconnected worker's announced addresses stay reachable this long (a tab that reconnects).
    turn_peer_grace_seconds: NotNegative = 60
    turn_max_allocations: int = 10_000
    turn_max_allocations_per_account: int = 1_000
    # Relayed bytes per second per allocation, each direction; 0 means no cap.
    turn_bandwidth_per_allocation: int = 12_500_000
    # How long a TURN nonce stays valid before the client must take a fresh one (438 Stale Nonce).
    turn_nonce_seconds: int = 600
    # Lifetime of the credentials handed to browsers.
    turn_credential_ttl_seconds: int = 24 * 3600
    stripe_api_key: str = ""
    stripe_api_base: str = ""
    # The signing secret of the Stripe webhook endpoint (POST /billing/stripe/webhook); empty turns it off.
    stripe_webhook_secret: str = ""
    timezone: str = "UTC"
    log_level: str = "info"
    # "text" for people reading a terminal or journal, "json" (one object a line) for log shippers.
    log_format: str = "text"
    # Built-in HTTPS (docs/operations.md): a PEM certificate chain and its private key, both or neither.
    # Browsers give WebGPU and crypto.subtle only to secure contexts: https, or localhost.
    tls_cert: str = ""
    tls_key: str = ""
    # Idle dashboard sessions expire after this many hours.
    session_hours: Positive = 12
    # Sign-in throttling (appliance/accounts/throttle.py): one email from one client address may fail
    # this many times, then waits the first wait, doubled at each further failure up to the longest.
    # An address that fails four times as often in the window, whatever the emails, waits too.
    login_max_failures: Positive = 5
    login_first_wait_seconds: Positive = 30
    # Sign-in failures are forgotten after a day (throttle.MEMORY).
    login_max_wait_minutes: MinutesInADay = 15
    login_window_minutes: MinutesInADay = 15
    # PMRFS: the largest object one upload may create (larger ones get 413 and store nothing),
    # and how many browsers should hold each blob (on distinct workers).
    pmrfs_max_upload_bytes: NotNegative = 10 * 1024**3
    replication_factor: Positive = 2
    # Job sandbox: comma-separated origins (https://data.example.com) job code may fetch from and
    # load scripts and WebAssembly from, besides the appliance itself. Admin → Settings adds more.
    fetch_origins: str = ""
    # How long a run waits for an idle eligible worker to take over a lost worker's rank.
    job_replacement_grace_seconds: Positive = 60
    # After a restart, how long a run that was running waits for its workers to come back before
    # their ranks go to others and what only they held is computed again.
    job_recovery_grace_seconds: NotNegative = 60
    # How long the rank of a worker that disconnected while running a task waits for it to come
    # back (its page keeps running the task and reports it when it reconnects).
    job_reconnect_grace_seconds: NotNegative = 10
    # On SIGTERM, how long `peermr serve` waits for running tasks to finish before it exits (the
    # runs continue at the next start; tasks cut short run again).
    shutdown_grace_seconds: NotNegative = 30
    # A run still queued after this many hours fails with a reason (0: it waits for ever); a run
    # may ask for another limit (its queueTimeout metadata, in seconds).
    job_queue_timeout_hours: Annotated[float, msgspec.Meta(ge=0)] = 24.0
    # Check the job engine's invariants after every step (jobs/invariants.py): a broken one fails the
    # scheduling round loudly. For tests and debugging; it costs a walk of each run's tasks per step.
    engine_checks: bool = False
    # While another account's run waits, an account's runs may not start beyond this share of the
    # connected workers (1: no limit).
    job_fair_share: Annotated[float, msgspec.Meta(gt=0, le=1)] = 1.0
    # A running task whose progress (emits, bytes written, context.progress()) has not moved for this
    # long while its worker still answers is stalled (and gets a backup attempt when speculation is on).
    job_stall_seconds: Positive = 60
    # The parameter-server values one run may hold in the appliance's memory, all keys together.
    ps_max_bytes_per_run: int = 1024**3
    # OpenID Connect single sign-on (docs/operations.md); an empty issuer turns it off. The provider
    # redirects back to <public_url>/login/sso/callback.
    sso_issuer: str = ""
    sso_client_id: str = ""
    sso_client_secret: str = ""
    sso_scopes: str = "openid email profile"
    # What the sign-in page calls the provider ("Sign in with ...").
    sso_name: str = "single sign-on"
    # Comma-separated email domains that may sign in (empty: any the provider vouches for).
    sso_allowed_domains: str = ""
    # The claim listing the person's groups, and which group gives which role
    # ("peermr-admins=admin, data-science=coordinator"); the highest role matched wins.
    sso_groups_claim: str = "groups"
    sso_role_groups: str = ""
    # The role of someone in none of those groups; empty refuses them.
    sso_default_role: str = "worker"
    # False: only single sign-on, except the break-glass admin (default: the first admin's email),
    # who can still sign in with a password when the provider is down.
    password_login: bool = True
    break_glass_email: str = ""
    # Per account (per address for callers without one): requests to /api/ and run submissions a
    # minute, in bursts of as many; over them the answer is 429 with Retry-After. 0 turns a limit off.
    api_requests_per_minute: RateLimit = 3000
    run_submissions_per_minute: RateLimit = 120
    # How often the Overview's plots sample the fleet (samples are kept 24 hours).
    metrics_sample_seconds: Positive = 60

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser().resolve()

    @property
    def sqlite_path(self) -> Path:
        return self.data_path / "peermr.sqlite3"

    @property
    def uses_postgres(self) -> bool:
        return self.database_url.startswith(("postgres://", "postgresql://"))

    @property
    def base_url(self) -> str:
        """The URL people should open, without a trailing slash."""
        if self.public_url:
            return self.public_url.rstrip("/")
        return self._url(socket.gethostname() if self.host in WILDCARD_HOSTS else self.host)

    @property
    def local_url(self) -> str:
        """The URL to open on the appliance's own machine: base_url, or localhost when listening on all addresses."""
        if self.public_url or self.host not in WILDCARD_HOSTS:
            return self.base_url
        return self._url("localhost")

    def _url(self, host: str) -> str:
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if self.tls_cert else 'http'}://{host}:{self.port}"

    @property
    def scheduler_url(self) -> str:
        """Where edges pass requests to this scheduler."""
        if self.advertise_url:
            return self.advertise_url.rstrip("/")
        return self._url(socket.gethostname() if self.host in WILDCARD_HOSTS else self.host)

    @property
    def secure_cookies(self) -> bool:
        return self.base_url.startswith("https://")


def parse_origins(text: str) -> list[str]:
    """Comma- or whitespace-separated web origins, normalised to scheme://host[:port]."""
    origins = []
    for item in text.replace(",", " ").split():
        parts = urlsplit(item)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{item!r} is not an origin like https://data.example.com")
        if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
            raise ValueError(f"{item!r} must be an origin only (scheme, host and port), without a path")
        origins.append(f"{parts.scheme}://{parts.netloc.lower()}")
    return list(dict.fromkeys(origins))


def parse_cidrs(text: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Comma- or whitespace-separated CIDRs (a bare address means just that address)."""
    networks = []
    for item in text.replace(",", " ").split():
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not an IP address or CIDR") from None
    return networks


FIELDS = {f.name: f for f in msgspec.structs.fields(Settings)}


def _describe_range(kind: type, meta: msgspec.Meta) -> str:
    if meta.ge is not None and meta.le is not None:
        bounds = f"between {meta.ge} and {meta.le}"
    else:
        lower = f"at least {meta.ge}" if meta.gt is None else f"more than {meta.gt}"
        upper = "" if meta.le is None else f" and at most {meta.le}"
        bounds = lower + upper
    note = "; " + meta.description if meta.description else ""
    return f"{bounds} ({'a whole number' if kind is int else 'a number'}{note})"


# msgspec's own message names only the bound a value crossed (or only the type it expected).
RANGES = {
    name: _describe_range(*get_args(hint))
    for name, hint in get_type_hints(Settings, include_extras=True).items()
    if get_args(hint)
}


def _from_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ConfigError(f"{path}: unknown setting(s) {', '.join(unknown)}")
    return data


def _from_env(environ: dict[str, str]) -> dict[str, Any]:
    return {name: environ[ENV_PREFIX + name.upper()] for name in FIELDS if ENV_PREFIX + name.upper() in environ}


def load_settings(overrides: dict[str, Any] | None = None, environ: dict[str, str] | None = None) -> Settings:
    """Merge defaults, the config file, the environment and flags (``None`` flags are ignored)."""
    environ = dict(os.environ if environ is None else environ)
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    env = _from_env(environ)
    data_dir = flags.get("data_dir") or env.get("data_dir") or DEFAULT_DATA_DIR
    merged = {**_from_file(Path(data_dir).expanduser() / CONFIG_FILE_NAME), **env, **flags}
    merged["data_dir"] = str(data_dir)
    try:
        settings = msgspec.convert(merged, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid setting: {_explain(exc, merged)}") from exc
    _check(settings)
    return settings


def _explain(exc: msgspec.ValidationError, merged: dict[str, Any]) -> str:
    field = re.search(r"at `\$\.(\w+)`$", str(exc))
    if field and field[1] in RANGES:
        return f"{field[1]} must be {RANGES[field[1]]}, got {merged[field[1]]!r}"
    return str(exc)


def _check(settings: Settings) -> None:
    if settings.public_url and not settings.public_url.startswith(("http://", "https://")):
        raise ConfigError(f"public_url must start with http:// or https://, got {settings.public_url!r}")
    if settings.database_url and not (settings.uses_postgres or settings.database_url.startswith("sqlite:")):
        raise ConfigError("database_url must be a postgresql:// URL (or empty for SQLite)")
    if settings.turn_min_port > settings.turn_max_port:
        raise ConfigError(
            f"turn_min_port ({settings.turn_min_port}) must not be above turn_max_port ({settings.turn_max_port})"
        )
    for name in ("turn_allowed_peers", "turn_denied_peers"):
        try:
            parse_cidrs(getattr(settings, name))
        except ValueError as exc:
            raise ConfigError(f"{name}: {exc}") from None
    try:
        ZoneInfo(settings.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"timezone {settings.timezone!r} is not a known time zone (e.g. UTC, Europe/Paris)") from None
    try:
        parse_origins(settings.fetch_origins)
    except ValueError as exc:
        raise ConfigError(f"fetch_origins: {exc}") from None
    _check_sso(settings)
    _check_logs_and_tls(settings)
    _check_role(settings)


SERVER_ROLES = ("all", "scheduler", "edge")


def _check_role(settings: Settings) -> None:
    if settings.role not in SERVER_ROLES:
        raise ConfigError(f"role must be one of {', '.join(SERVER_ROLES)}, got {settings.role!r}")
    if settings.role == "all":
        return
    if not settings.uses_postgres:
        raise ConfigError(
            f"role {settings.role} runs beside other processes, which share one database: set database_url "
            "(PEERMR_DATABASE_URL) to a postgresql:// URL; SQLite serves the one-process appliance (role all) only"
        )
    if not settings.redis_url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(
            f"role {settings.role} passes worker messages over Redis: set redis_url (PEERMR_REDIS_URL) "
            "to a redis:// URL"
        )
    if settings.advertise_url and not settings.advertise_url.startswith(("http://", "https://")):
        raise ConfigError(f"advertise_url must start with http:// or https://, got {settings.advertise_url!r}")


def parse_role_groups(text: str) -> dict[str, str]:
    """``"group=role, group=role"`` as {group: role}."""
    mapping = {}
    for item in text.split(","):
        if not item.strip():
            continue
        group, sep, role = item.rpartition("=")
        if not sep or not group.strip() or role.strip() not in ROLES:
            raise ValueError(f"{item.strip()!r} is not group=role with a role of {', '.join(ROLES)}")
        mapping[group.strip()] = role.strip()
    return mapping


def parse_domains(text: str) -> list[str]:
    return [d.strip().lower().lstrip("@") for d in text.replace(",", " ").split() if d.strip()]


ROLES = ("admin", "coordinator", "worker")


def _check_sso(settings: Settings) -> None:
    if settings.sso_issuer:
        if not settings.sso_issuer.startswith(("http://", "https://")):
            raise ConfigError(f"sso_issuer must be an http(s) URL, got {settings.sso_issuer!r}")
        if not settings.sso_client_id or not settings.sso_client_secret:
            raise ConfigError("sso_issuer needs sso_client_id and sso_client_secret (from the provider's client)")
        if "openid" not in settings.sso_scopes.split():
            raise ConfigError("sso_scopes must include openid")
    elif not settings.password_login:
        raise ConfigError("password_login = false needs single sign-on (sso_issuer and its client)")
    try:
        parse_role_groups(settings.sso_role_groups)
    except ValueError as exc:
        raise ConfigError(f"sso_role_groups: {exc}") from None
    if settings.sso_default_role and settings.sso_default_role not in ROLES:
        raise ConfigError(f"sso_default_role must be one of {', '.join(ROLES)} or empty (refuse)")


LOG_FORMATS = ("text", "json")


def _check_logs_and_tls(settings: Settings) -> None:
    if settings.log_format not in LOG_FORMATS:
        raise ConfigError(f"log_format must be one of {', '.join(LOG_FORMATS)}, got {settings.log_format!r}")
    if bool(settings.tls_cert) != bool(settings.tls_key):
        raise ConfigError("tls_cert and tls_key go together: set both (PEM files) or neither")
    for name in ("tls_cert", "tls_key"):
        path = getattr(settings, name)
        if path and not Path(path).expanduser().is_file():
            raise ConfigError(f"{name}: no file {path}")
