"""Personal API tokens for the REST API, the CLI and command-line workers."""

from __future__ import annotations

import datetime as dt

import msgspec

from appliance.accounts import credentials, sessions
from appliance.accounts.sessions import Principal
from appliance.accounts.tables import ApiToken, Session
from appliance.accounts.users import AccountError, email_of
from appliance.audit import service as audit
from appliance.clock import now
from appliance.errors import NotFound

LAST_USED_RESOLUTION = dt.timedelta(minutes=1)
MAX_TOKENS_PER_USER = 50


class TokenInfo(msgspec.Struct, frozen=True):
    id: int
    name: str
    prefix: str
    created_at: dt.datetime
    last_used_at: dt.datetime | None
    revoked_at: dt.datetime | None


_FIELDS = (ApiToken.id, ApiToken.name, ApiToken.prefix, ApiToken.created_at, ApiToken.last_used_at, ApiToken.revoked_at)


async def create(user_id: int, name: str) -> tuple[TokenInfo, str]:
    """Create a token; the plaintext is returned here and never again."""
    name = name.strip() or "API token"
    if len(name) > 100:
        raise AccountError("Token names may have at most 100 characters.")
    live = await ApiToken.count().where((ApiToken.user == user_id) & ApiToken.revoked_at.is_null())
    if live >= MAX_TOKENS_PER_USER:
        raise AccountError(f"You already have {MAX_TOKENS_PER_USER} tokens; revoke one first.")
    token = credentials.new_token(credentials.API_TOKEN_PREFIX)
    rows = await ApiToken.insert(
        ApiToken(
            user=user_id,
            name=name,
            prefix=credentials.shown_prefix(token),
            token_hash=credentials.token_hash(token),
            created_at=now(),
        )
    ).returning(*_FIELDS)
    info = TokenInfo(**rows[0])
    await audit.note("token.created", await _described(user_id, info), None, {"name": info.name, "prefix": info.prefix})
    return info, token


async def _described(user_id: int, info: TokenInfo) -> str:
    return f"token #{info.id} of {await email_of(user_id) or f'account {user_id}'}"


async def list_for(user_id: int) -> list[TokenInfo]:
    rows = (
        await ApiToken.select(*_FIELDS).where(ApiToken.user == user_id).order_by(ApiToken.created_at, ascending=False)
    )
    return [TokenInfo(**r) for r in rows]


async def revoke(user_id: int, token_id: int) -> TokenInfo:
    """Revoke one of the user's own tokens (idempotent); the worker tabs that joined with it stop."""
    revoked = (
        await ApiToken.update({ApiToken.revoked_at: now()})
        .where((ApiToken.id == token_id) & (ApiToken.user == user_id) & ApiToken.revoked_at.is_null())
        .returning(ApiToken.id)
    )
    row = await ApiToken.select(*_FIELDS).where((ApiToken.id == token_id) & (ApiToken.user == user_id)).first()
    if row is None:
        raise NotFound("No such token.")
    info = TokenInfo(**row)
    if revoked:
        await audit.note("token.revoked", await _described(user_id, info), {"revoked": False}, {"revoked": True})
        await sessions.end_where(Session.api_token == token_id, "the token this tab joined with was revoked")
    return info


async def id_of(token: str) -> int | None:
    """The id of the token that is ``token``, revoked or not."""
    row = await ApiToken.select(ApiToken.id).where(ApiToken.token_hash == credentials.token_hash(token)).first()
    return row["id"] if row else None


async def resolve(token: str) -> Principal | None:
    token_hash = credentials.token_hash(token)
    row = (
        await ApiToken.select(
            ApiToken.id,
            ApiToken.last_used_at,
            ApiToken.user.id.as_alias("user_id"),
            ApiToken.user.email.as_alias("email"),
            ApiToken.user.role.as_alias("role"),
            ApiToken.user.active.as_alias("active"),
        )
        .where((ApiToken.token_hash == token_hash) & ApiToken.revoked_at.is_null())
        .first()
    )
    if row is None or not row["active"]:
        return None
    t = now()
    if row["last_used_at"] is None or t - row["last_used_at"] >= LAST_USED_RESOLUTION:
        await ApiToken.update({ApiToken.last_used_at: t}).where(ApiToken.id == row["id"])
    # A pending password change does not block a token: the token is its own credential.
    return Principal(
        user_id=row["user_id"],
        email=row["email"],
        role=row["role"],
        must_change_password=False,
        via="token",
        credential_hash=token_hash,
    )
