"""Account tables. Every secret here is stored as a hash, never in the clear."""

from enum import StrEnum

from piccolo.columns import (
    Boolean,
    ForeignKey,
    Integer,
    OnDelete,
    Timestamptz,
    Varchar,
)
from piccolo.table import Table


class Role(StrEnum):
    admin = "admin"
    coordinator = "coordinator"
    worker = "worker"


class User(Table, tablename="accounts_user"):
    email = Varchar(length=254, unique=True, index=True)
    role = Varchar(length=16, choices=Role)
    active = Boolean(default=True)
    # argon2id encoded hash (parameters and salt included).
    password_hash = Varchar(length=255)
    # Set for generated passwords (first start, admin reset): the owner must choose a new one.
    must_change_password = Boolean(default=False)
    created_at = Timestamptz()
    last_login_at = Timestamptz(null=True, default=None)


class ApiToken(Table, tablename="accounts_api_token"):
    user = ForeignKey(User, on_delete=OnDelete.cascade, null=False)
    name = Varchar(length=100)
    # The first characters of the token, to tell tokens apart in lists.
    prefix = Varchar(length=16)
    token_hash = Varchar(length=64, unique=True, index=True)
    created_at = Timestamptz()
    last_used_at = Timestamptz(null=True, default=None)
    revoked_at = Timestamptz(null=True, default=None)


class EnrolmentLink(Table, tablename="accounts_enrolment_link"):
    """Lets a browser join as a worker of ``account`` without signing in."""

    account = ForeignKey(User, on_delete=OnDelete.cascade, null=False)
    label = Varchar(length=100)
    prefix = Varchar(length=16)
    token_hash = Varchar(length=64, unique=True, index=True)
    created_by = ForeignKey(User, on_delete=OnDelete.set_null, null=True)
    created_at = Timestamptz()
    expires_at = Timestamptz()
    # None: any number of browsers may join with this link.
    max_uses = Integer(null=True, default=None)
    uses = Integer(default=0)
    revoked_at = Timestamptz(null=True, default=None)


class Session(Table, tablename="accounts_session"):
    """A signed-in dashboard browser, or an enrolled worker browser (``kind='worker'``)."""

    key_hash = Varchar(length=64, unique=True, index=True)
    user = ForeignKey(User, on_delete=OnDelete.cascade, null=False)
    kind = Varchar(length=16, default="dashboard")
    created_at = Timestamptz()
    last_seen_at = Timestamptz()
    expires_at = Timestamptz(index=True)
    user_agent = Varchar(length=255, default="")
    client = Varchar(length=64, default="")
    # The token a worker session was made from (at most one of the two): revoking it ends the session.
    api_token = ForeignKey(ApiToken, on_delete=OnDelete.cascade, null=True, default=None, index=True)
    enrolment_link = ForeignKey(EnrolmentLink, on_delete=OnDelete.cascade, null=True, default=None, index=True)


class LoginFailure(Table, tablename="accounts_login_failure"):
    """One failed sign-in; recent rows throttle further attempts."""

    email = Varchar(length=254, index=True)
    client = Varchar(length=64, index=True)
    at = Timestamptz(index=True)
