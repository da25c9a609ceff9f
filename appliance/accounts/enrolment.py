"""Enrolment links: a URL that lets a browser join as a worker of one account."""

from __future__ import annotations

import datetime as dt

import msgspec

from appliance.accounts import credentials, sessions
from appliance.accounts.tables import EnrolmentLink, Session, User
from appliance.accounts.users import AccountError
from appliance.audit import service as audit
from appliance.clock import now
from appliance.errors import Gone, NotFound

MAX_LIFETIME = dt.timedelta(days=365)


class LinkInfo(msgspec.Struct, frozen=True):
    id: int
    account_id: int
    account_email: str
    label: str
    prefix: str
    created_at: dt.datetime
    expires_at: dt.datetime
    max_uses: int | None
    uses: int
    revoked_at: dt.datetime | None

    @property
    def status(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at <= now():
            return "expired"
        if self.max_uses is not None and self.uses >= self.max_uses:
            return "used up"
        return "active"


class EnrolmentRefused(Gone):
    """The link cannot be used; the message says why, without naming the account."""


_FIELDS = (
    EnrolmentLink.id,
    EnrolmentLink.account.id.as_alias("account_id"),
    EnrolmentLink.account.email.as_alias("account_email"),
    EnrolmentLink.label,
    EnrolmentLink.prefix,
    EnrolmentLink.created_at,
    EnrolmentLink.expires_at,
    EnrolmentLink.max_uses,
    EnrolmentLink.uses,
    EnrolmentLink.revoked_at,
)


async def create(
    account_id: int, created_by: int, label: str, lifetime: dt.timedelta, max_uses: int | None
) -> tuple[LinkInfo, str]:
    """Create a link; the token is returned here and never again."""
    if not await User.exists().where((User.id == account_id) & (User.active == True)):  # noqa: E712
        raise AccountError("Choose an active account for the workers to join.")
    if not dt.timedelta(minutes=5) <= lifetime <= MAX_LIFETIME:
        raise AccountError("A link must be valid for between 5 minutes and 365 days.")
    if max_uses is not None and max_uses < 1:
        raise AccountError("The number of uses must be at least 1 (or empty for no limit).")
    token = credentials.new_token(credentials.ENROLMENT_TOKEN_PREFIX)
    t = now()
    rows = await EnrolmentLink.insert(
        EnrolmentLink(
            account=account_id,
            label=label.strip()[:100] or "Enrolment link",
            prefix=credentials.shown_prefix(token),
            token_hash=credentials.token_hash(token),
            created_by=created_by,
            created_at=t,
            expires_at=t + lifetime,
            max_uses=max_uses,
            uses=0,
        )
    ).returning(EnrolmentLink.id)
    link = await get(rows[0]["id"])
    await audit.note(
        "enrolment.created",
        f"link #{link.id} for {link.account_email}",
        None,
        {"label": link.label, "expires_at": link.expires_at, "max_uses": max_uses},
    )
    return link, token


async def get(link_id: int) -> LinkInfo:
    row = await EnrolmentLink.select(*_FIELDS).where(EnrolmentLink.id == link_id).first()
    if row is None:
        raise NotFound("No such enrolment link.")
    return LinkInfo(**row)


async def list_all() -> list[LinkInfo]:
    rows = await EnrolmentLink.select(*_FIELDS).order_by(EnrolmentLink.created_at, ascending=False)
    return [LinkInfo(**r) for r in rows]


async def revoke(link_id: int) -> LinkInfo:
    """No browser joins with the link any more, and those that joined with it stop."""
    revoked = (
        await EnrolmentLink.update({EnrolmentLink.revoked_at: now()})
        .where((EnrolmentLink.id == link_id) & EnrolmentLink.revoked_at.is_null())
        .returning(EnrolmentLink.id)
    )
    link = await get(link_id)
    if revoked:
        await audit.note(
            "enrolment.revoked", f"link #{link.id} for {link.account_email}", {"revoked": False}, {"revoked": True}
        )
        await sessions.end_where(
            Session.enrolment_link == link_id, "the enrolment link this tab joined with was revoked"
        )
    return link


async def peek(token: str) -> LinkInfo:
    """The link for a token if it can still be used, without using it."""
    row = await EnrolmentLink.select(*_FIELDS).where(EnrolmentLink.token_hash == credentials.token_hash(token)).first()
    if row is None:
        raise EnrolmentRefused("This enrolment link is not valid. Ask your administrator for a new one.")
    link = LinkInfo(**row)
    if link.status != "active":
        raise EnrolmentRefused(f"This enrolment link is {link.status}. Ask your administrator for a new one.")
    return link


async def redeem(token: str) -> LinkInfo:
    """Use the link once; the returned link names the account the browser now works for."""
    link = await peek(token)
    # The use count is checked in the same statement, so concurrent redemptions cannot exceed it.
    condition = (EnrolmentLink.id == link.id) & EnrolmentLink.revoked_at.is_null() & (EnrolmentLink.expires_at > now())
    if link.max_uses is not None:
        condition &= EnrolmentLink.uses < link.max_uses
    updated = (
        await EnrolmentLink.update({EnrolmentLink.uses: EnrolmentLink.uses + 1})
        .where(condition)
        .returning(EnrolmentLink.id)
    )
    if not updated:
        raise EnrolmentRefused("This enrolment link has just been used up. Ask your administrator for a new one.")
    used = await get(link.id)
    await audit.note(
        "enrolment.used", f"link #{link.id} for {link.account_email}", {"uses": link.uses}, {"uses": used.uses}
    )
    return used
