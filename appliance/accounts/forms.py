"""Form bodies of the account pages. Missing fields arrive as empty strings, never as a crash."""

from __future__ import annotations

from typing import Annotated, TypeVar

import msgspec
from litestar.enums import RequestEncodingType
from litestar.params import Body

T = TypeVar("T")

# A form body: `data: Form[LoginForm]`.
Form = Annotated[T, Body(media_type=RequestEncodingType.URL_ENCODED)]


class LoginForm(msgspec.Struct):
    email: str = ""
    password: str = ""
    next: str = ""


class PasswordForm(msgspec.Struct):
    current_password: str = ""
    new_password: str = ""
    confirm_password: str = ""


class TokenForm(msgspec.Struct):
    name: str = ""


class NewAccountForm(msgspec.Struct):
    email: str = ""
    role: str = "coordinator"
    password: str = ""


class RoleForm(msgspec.Struct):
    role: str = ""


class ActiveForm(msgspec.Struct):
    active: str = ""


class LockoutForm(msgspec.Struct):
    email: str = ""  # empty: the address's lockout for every email
    address: str = ""


class EnrolmentForm(msgspec.Struct):
    account_id: str = ""
    label: str = ""
    valid_hours: str = "168"
    max_uses: str = ""


def safe_next(target: str) -> str:
    """A post-login destination on this site only (no open redirect)."""
    if target.startswith("/") and not target.startswith(("//", "/\\")):
        return target
    return "/ui"
