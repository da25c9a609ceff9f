"""Cloud Data tables: one row of bucket settings per account."""

from piccolo.columns import ForeignKey, OnDelete, Text, Timestamptz, Varchar
from piccolo.table import Table

from appliance.accounts.tables import User


class CloudSettings(Table, tablename="cloud_settings"):
    """An account's bucket for the s3/gcs storage type. The secret is stored only encrypted."""

    account = ForeignKey(User, on_delete=OnDelete.cascade, null=False, unique=True, index=True)
    # "s3" or "gcs" (see validation.py).
    provider = Varchar(length=8)
    # Empty for AWS's own endpoints; the S3-compatible server's address otherwise.
    endpoint_url = Varchar(length=2048, default="")
    region = Varchar(length=32)
    bucket = Varchar(length=222)
    access_key_id = Varchar(length=128)
    # Fernet token (AES-128-CBC + HMAC-SHA256) of the secret access key, under the key in secrets.json.
    secret_access_key_encrypted = Text()
    updated_at = Timestamptz()
