"""Users: creation, roles, disabling, passwords."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable

import msgspec
from piccolo.query.functions.aggregate import Count

from appliance.accounts import credentials, sessions
from appliance.accounts.passwords import check_strength, hash_password, verify_password
from appliance.accounts.tables import Role, Session, User
from appliance.audit import service as audit
from appliance.audit.context import acting, current
from appliance.clock import now
from appliance.errors import InvalidRequest, NotFound

# Deliberately loose: one @, no spaces, a dot in the domain. Delivery is not our concern.
EMAIL_RE = re.compile(r"^[^@\s]{1,64}@[^@\s]+\.[^@\s]+$")


class AccountError(InvalidRequest):
    """A request about accounts that cannot be honoured; the message is shown to the user."""


class CredentialsRefused(Exception):
    """An email and password that match no active account; ``why`` is for the audit log only (the
    person is told the same in every case)."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


class Account(msgspec.Struct, frozen=True):
    """What the rest of the appliance knows about a user."""

    id: int
    email: str
    role: str
    active: bool
    must_change_password: bool
    created_at: dt.datetime
    last_login_at: dt.datetime | None

    @property
    def is_admin(self) -> bool:
        return self.role == Role.admin.value


def normalise_email(email: str) -> str:
    email = email.strip().lower()
    if not EMAIL_RE.match(email) or len(email) > 254:
        raise AccountError(f"{email or 'An empty string'} is not an email address.")
    return email


def check_role(role: str) -> str:
    if role not in {r.value for r in Role}:
        raise AccountError(f"Unknown role {role!r}; choose admin, coordinator or worker.")
    return role


def _account(row: dict) -> Account:
    return Account(
        id=row["id"],
        email=row["email"],
        role=row["role"],
        active=bool(row["active"]),
        must_change_password=bool(row["must_change_password"]),
        created_at=row["created_at"],
        last_login_at=row["last_login_at"],
    )


_FIELDS = (User.id, User.email, User.role, User.active, User.must_change_password, User.created_at, User.last_login_at)


async def create_user(email: str, role: str, password: str | None = None) -> tuple[Account, str | None]:
    """Create a user. Without a password, one is generated, returned once, and must be changed at first sign-in."""
    email = normalise_email(email)
    check_role(role)
    generated = None
    if password is None:
        password = generated = credentials.new_password()
    else:
        check_strength(password)
    pw_hash = await hash_password(password)
    async with User._meta.db.transaction():
        if await User.exists().where(User.email == email):
            raise AccountError(f"An account for {email} already exists.")
        await User.insert(
            User(
                email=email,
                role=role,
                active=True,
                password_hash=pw_hash,
                must_change_password=generated is not None,
                created_at=now(),
            )
        )
    account = await get_by_email(email)
    assert account is not None
    await audit.note("account.created", email, None, {"role": role, "generated_password": generated is not None})
    return account, generated


async def get(user_id: int) -> Account | None:
    row = await User.select(*_FIELDS).where(User.id == user_id).first()
    return _account(row) if row else None


async def emails(account_ids: Iterable[int]) -> dict[int, str]:
    """The email of each of these accounts, in one query; an account that does not exist has no entry."""
    ids = sorted(set(account_ids))
    if not ids:
        return {}
    rows = await User.select(User.id, User.email).where(User.id.is_in(ids))
    return {r["id"]: r["email"] for r in rows}


async def email_of(account_id: int) -> str | None:
    """The account's email, or None if there is no such account."""
    return (await emails([account_id])).get(account_id)


async def get_by_email(email: str) -> Account | None:
    row = await User.select(*_FIELDS).where(User.email == email.strip().lower()).first()
    return _account(row) if row else None


async def list_all() -> list[Account]:
    rows = await User.select(*_FIELDS).order_by(User.email)
    return [_account(r) for r in rows]


async def count_admins() -> int:
    return await User.count().where((User.role == Role.admin.value) & (User.active == True))  # noqa: E712


async def _ensure_other_admin_remains(user_id: int) -> None:
    """Call inside a transaction that then demotes or disables ``user_id``."""
    admins = User.select(User.id).where((User.role == Role.admin.value) & (User.active == True))  # noqa: E712
    if User._meta.db.engine_type == "postgres":
        # Two admins demoting each other at once must not both succeed. SQLite's
        # IMMEDIATE transactions already serialise this; PostgreSQL needs the row locks.
        admins = admins.lock_rows()
    if not [row for row in await admins if row["id"] != user_id]:
        raise AccountError("This is the last active admin; make another admin first.")


def _dashboard_sessions(user_id: int):
    """The user's dashboard sessions: those a password or single sign-on made (worker sessions come
    from tokens and enrolment links, which end on their own)."""
    return (Session.user == user_id) & (Session.kind == sessions.DASHBOARD)


async def set_role(user_id: int, role: str) -> Account:
    """Change the role; the account's dashboard sessions end (it signs in again), so no open page or
    connection keeps what the old role allowed."""
    check_role(role)
    async with User._meta.db.transaction():
        account = await _require(user_id)
        if account.is_admin and role != Role.admin.value:
            await _ensure_other_admin_remains(user_id)
        await User.update({User.role: role}).where(User.id == user_id)
    await audit.note("account.role", account.email, {"role": account.role}, {"role": role})
    if role != account.role:
        await sessions.end_where(_dashboard_sessions(user_id), f"the account's role changed to {role}: sign in again")
    return await _require(user_id)


async def set_active(user_id: int, active: bool) -> Account:
    async with User._meta.db.transaction():
        account = await _require(user_id)
        if account.is_admin and not active:
            await _ensure_other_admin_remains(user_id)
        await User.update({User.active: active}).where(User.id == user_id)
    await audit.note("account.active", account.email, {"active": account.active}, {"active": active})
    if not active:
        # A disabled account is signed out everywhere at once, its worker tabs too.
        await sessions.end_where(Session.user == user_id, "the account was disabled")
    return await _require(user_id)


async def reset_password(user_id: int) -> tuple[Account, str]:
    """Give the user a new generated password they must change; ends their dashboard sessions."""
    account = await _require(user_id)
    password = credentials.new_password()
    pw_hash = await hash_password(password)
    await User.update({User.password_hash: pw_hash, User.must_change_password: True}).where(User.id == user_id)
    await sessions.end_where(_dashboard_sessions(user_id), "the account's password was reset: sign in again")
    await audit.note("account.password_reset", account.email)
    return await _require(user_id), password


async def change_password(user_id: int, current: str, new: str, keep_session_hash: str | None = None) -> None:
    """The owner changes their password; other sessions of theirs end."""
    row = await User.select(User.password_hash).where(User.id == user_id).first()
    if row is None or not await verify_password(row["password_hash"], current):
        raise AccountError("The current password is not right.")
    if new == current:
        raise AccountError("Choose a password different from the current one.")
    check_strength(new)
    pw_hash = await hash_password(new)
    await User.update({User.password_hash: pw_hash, User.must_change_password: False}).where(User.id == user_id)
    others = _dashboard_sessions(user_id)
    if keep_session_hash:
        others &= Session.key_hash != keep_session_hash
    await sessions.end_where(others, "the account's password was changed: sign in again")
    await audit.note("account.password_changed", await email_of(user_id) or f"account {user_id}")


async def check_credentials(email: str, password: str) -> Account:
    """The active account these are the email and password of, else CredentialsRefused (same timing either way)."""
    row = await User.select(*_FIELDS, User.password_hash).where(User.email == email.strip().lower()).first()
    ok = await verify_password(row["password_hash"] if row else None, password)
    if not ok or not row:
        raise CredentialsRefused("wrong password or no such account")
    if not row["active"]:
        raise CredentialsRefused("account disabled")
    return _account(row)


async def set_last_login(user_id: int) -> None:
    await User.update({User.last_login_at: now()}).where(User.id == user_id)


async def account_from_provider(email: str, role: str | None, new_account_role: str) -> Account:
    """The account of someone the identity provider vouched for.

    Created at first sign-in with ``new_account_role`` (and a random password nobody knows: such
    accounts sign in through the provider); an existing one takes ``role`` when the provider's groups
    give one, except that the last active admin is never demoted this way. A disabled account, or
    none when ``new_account_role`` is empty, is refused. The person signing in is the actor of what
    this changes.
    """
    email = normalise_email(email)
    with acting(email, current().address):
        account = await get_by_email(email)
        if account is None:
            if not new_account_role:
                raise AccountError(f"There is no account for {email} here; ask an administrator to create one.")
            created = (
                await User.insert(
                    User(
                        email=email,
                        role=check_role(new_account_role),
                        active=True,
                        password_hash=await hash_password(credentials.new_password()),
                        must_change_password=False,
                        created_at=now(),
                    )
                )
                .on_conflict(target=User.email, action="DO NOTHING")
                .returning(User.id)
            )
            if created:  # not when another sign-in of the same person created it just before
                await audit.note("account.created", email, None, {"role": new_account_role, "single_sign_on": True})
            account = await get_by_email(email)
            assert account is not None
        if not account.active:
            raise AccountError(f"The account {email} is disabled.")
        if role and role != account.role:
            try:
                account = await set_role(account.id, role)
            except AccountError:
                pass  # the last admin keeps the role; another admin changes it by hand
    if account.must_change_password:
        # A one-time password handed out before: the provider proved who this is, so the password
        # is not needed and is voided rather than left working.
        await User.update(
            {User.password_hash: await hash_password(credentials.new_password()), User.must_change_password: False}
        ).where(User.id == account.id)
    return await _require(account.id)


async def _require(user_id: int) -> Account:
    account = await get(user_id)
    if account is None:
        raise NotFound("No such account.")
    return account


async def count_by_role() -> dict[str, int]:
    rows = await User.select(User.role, Count(User.id).as_alias("n")).where(User.active == True).group_by(User.role)  # noqa: E712
    counts = {r.value: 0 for r in Role}
    counts.update({r["role"]: r["n"] for r in rows})
    return counts
