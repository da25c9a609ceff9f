"""Sign-in throttling: a growing wait per (email, client address) pair, and a limit per address.

A pair is an email *string* (whether or not such an account exists, so a refusal reveals nothing)
tried from one client address. Its first failures cost nothing; the one that reaches
``Policy.failures`` makes the pair wait ``first_wait``, and each further failure doubles the wait,
up to ``max_wait`` (as Keycloak's brute-force detection does). While it waits, the pair is refused
without its password being checked, the right password included: a guess that succeeded would
otherwise show through. After the wait the password is checked again, and the right one signs in
and forgets the pair's failures. Because the wait is per pair, failures from one address never
lock the account out from another: an attacker slows only their own guessing.

An address that fails ``failures * CLIENT_FACTOR`` times within ``window``, whatever the emails
(password spraying), is refused for every email until the oldest of those failures leaves the window.

Failures are rows in the database, so a restart forgets none and edges sharing a database see the
same counts. They are forgotten after ``MEMORY``, or when an admin clears the lockout.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math

import msgspec
from piccolo.query.methods.select import Count, Max

from appliance.accounts.tables import LoginFailure
from appliance.audit import service as audit
from appliance.clock import now
from appliance.config import Settings
from appliance.errors import NotFound, TooManyRequests

# An address may fail this many times more than one pair before it is refused for every email.
CLIENT_FACTOR = 4
# How long a failure counts towards its pair's wait.
MEMORY = dt.timedelta(days=1)
# The longest doubling computed (any cap in minutes is reached far sooner).
MAX_DOUBLINGS = 32

# Audit action of an admin clearing a lockout.
CLEARED = "sign-in.lockout-cleared"

# A check and the failure it reserves are one step in this process, so parallel guesses each see
# the others' failures (across processes, the database rows still count them all after the fact).
_reserve_lock = asyncio.Lock()


class Policy(msgspec.Struct, frozen=True):
    failures: int
    first_wait: dt.timedelta
    max_wait: dt.timedelta
    window: dt.timedelta

    @classmethod
    def of(cls, settings: Settings) -> Policy:
        return cls(
            failures=settings.login_max_failures,
            first_wait=dt.timedelta(seconds=settings.login_first_wait_seconds),
            max_wait=dt.timedelta(minutes=settings.login_max_wait_minutes),
            window=dt.timedelta(minutes=settings.login_window_minutes),
        )

    @property
    def address_limit(self) -> int:
        return self.failures * CLIENT_FACTOR

    def wait(self, failures: int) -> dt.timedelta:
        """How long a pair waits after its ``failures``-th failure."""
        if failures < self.failures:
            return dt.timedelta(0)
        return min(self.first_wait * 2 ** min(failures - self.failures, MAX_DOUBLINGS), self.max_wait)


class Lockout(msgspec.Struct, frozen=True):
    """Sign-ins of ``email`` from ``client`` are refused until ``until`` (``email`` empty: every email)."""

    email: str
    client: str
    failures: int
    until: dt.datetime

    @property
    def target(self) -> str:
        """How the audit log names it."""
        return f"{self.email or '(every email)'} from {self.client}"

    @property
    def seconds_left(self) -> int:
        return max(1, math.ceil((self.until - now()).total_seconds()))

    @property
    def advice(self) -> str:
        return advice(self.seconds_left)


def advice(seconds: int) -> str:
    if seconds >= 120:
        wait = f"{math.ceil(seconds / 60)} minutes"
    else:
        wait = f"{seconds} second{'s' if seconds != 1 else ''}"
    return f"Too many failed attempts from this address: try again in {wait}."


class Throttled(TooManyRequests):
    def __init__(self, lockout: Lockout):
        self.lockout = lockout
        # Once, so the message and Retry-After say the same.
        self.retry_after = lockout.seconds_left
        super().__init__(advice(self.retry_after))


def _timestamp(value: dt.datetime | str) -> dt.datetime:
    # An aggregate over a timestamp comes back from SQLite as its text.
    return dt.datetime.fromisoformat(value) if isinstance(value, str) else value


async def _pair_lockouts(policy: Policy, email: str | None = None, client: str | None = None) -> list[Lockout]:
    """The pairs waiting now (only that of ``email`` from ``client`` when given)."""
    query = LoginFailure.select(
        LoginFailure.email,
        LoginFailure.client,
        Count(LoginFailure.id).as_alias("n"),
        Max(LoginFailure.at).as_alias("last"),
    ).where(LoginFailure.at >= now() - MEMORY)
    if email is not None:
        query = query.where((LoginFailure.email == email) & (LoginFailure.client == client))
    lockouts = []
    for row in await query.group_by(LoginFailure.email, LoginFailure.client):
        until = _timestamp(row["last"]) + policy.wait(row["n"])
        if row["n"] >= policy.failures and until > now():
            lockouts.append(Lockout(row["email"], row["client"], row["n"], until))
    return lockouts


async def _address_lockouts(policy: Policy, client: str | None = None) -> list[Lockout]:
    """The addresses refused for every email now (only ``client`` when given)."""
    since = now() - policy.window
    query = LoginFailure.select(LoginFailure.client, Count(LoginFailure.id).as_alias("n")).where(
        LoginFailure.at >= since
    )
    if client is not None:
        query = query.where(LoginFailure.client == client)
    lockouts = []
    for row in await query.group_by(LoginFailure.client):
        if row["n"] < policy.address_limit:
            continue
        # Free again when the oldest of the last `limit` failures leaves the window.
        oldest = (
            await LoginFailure.select(LoginFailure.at)
            .where((LoginFailure.client == row["client"]) & (LoginFailure.at >= since))
            .order_by(LoginFailure.at, ascending=False)
            .offset(policy.address_limit - 1)
            .first()
        )
        lockouts.append(Lockout("", row["client"], row["n"], oldest["at"] + policy.window))
    return lockouts


async def _in_force(policy: Policy, email: str, client: str) -> list[Lockout]:
    return [*await _pair_lockouts(policy, email, client), *await _address_lockouts(policy, client)]


def _longest(lockouts: list[Lockout]) -> Lockout | None:
    return max(lockouts, key=lambda lockout: lockout.until, default=None)


async def attempt(policy: Policy, email: str, client: str) -> None:
    """Raise Throttled if ``email`` from ``client`` must wait; else count the attempt as failed until
    ``succeeded`` says otherwise (so guesses sent in parallel cannot all pass one check)."""
    async with _reserve_lock:
        if lockout := _longest(await _in_force(policy, email, client)):
            raise Throttled(lockout)
        await LoginFailure.insert(LoginFailure(email=email, client=client, at=now()))


async def failed(policy: Policy, email: str, client: str) -> tuple[Lockout | None, list[Lockout]]:
    """After a wrong password: the wait now in force (the longest), and the lockouts this failure started."""
    found = await _in_force(policy, email, client)
    limit = {True: policy.failures, False: policy.address_limit}
    return _longest(found), [lockout for lockout in found if lockout.failures == limit[bool(lockout.email)]]


async def succeeded(email: str, client: str) -> None:
    """The right password: the pair's failures are forgotten (the address's other pairs keep theirs)."""
    await LoginFailure.delete().where((LoginFailure.email == email) & (LoginFailure.client == client))


async def lockouts(policy: Policy) -> list[Lockout]:
    """Every lockout in force: addresses refused for every email first, then pairs by email."""
    pairs = await _pair_lockouts(policy)
    return await _address_lockouts(policy) + sorted(pairs, key=lambda lockout: (lockout.email, lockout.client))


async def clear(policy: Policy, email: str, client: str) -> Lockout:
    """An admin ends a lockout: the failures that made it are forgotten (``email`` empty: the
    address's lockout for every email, and all its failures)."""
    found = await (_pair_lockouts(policy, email, client) if email else _address_lockouts(policy, client))
    if not found:
        raise NotFound(f"There is no lockout of {email or 'every email'} from {client} (it may have ended).")
    where = LoginFailure.client == client
    if email:
        where &= LoginFailure.email == email
    await LoginFailure.delete().where(where)
    await audit.note(CLEARED, found[0].target, {"failures": found[0].failures, "until": found[0].until.isoformat()})
    return found[0]
