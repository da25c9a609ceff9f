"""The first admin, created on first start."""

from __future__ import annotations

from appliance.accounts import users
from appliance.accounts.tables import Role
from appliance.config import Settings

DEFAULT_ADMIN_EMAIL = "admin@peermr.local"


async def ensure_admin(settings: Settings) -> tuple[str, str | None] | None:
    """Create an admin when there is none.

    Returns (email, generated password or None) when one was created, so the
    caller can print the login once; None when an admin already existed.
    """
    if await users.count_admins() > 0:
        return None
    email = settings.admin_email or DEFAULT_ADMIN_EMAIL
    existing = await users.get_by_email(email)
    if existing is not None:
        # The configured email belongs to a non-admin (or disabled) account: promote it.
        await users.set_role(existing.id, Role.admin.value)
        await users.set_active(existing.id, True)
        return email, None
    account, generated = await users.create_user(email, Role.admin.value, settings.admin_password or None)
    return account.email, generated
