"""PMRFS tables: the namenode's view of buckets, objects, blobs and who holds which blob."""

from piccolo.columns import BigInt, Boolean, ForeignKey, Integer, OnDelete, Timestamptz, Varchar
from piccolo.table import Table

from appliance.accounts.tables import User


class Bucket(Table, tablename="pmrfs_bucket"):
    # S3-style, globally unique (see names.py).
    name = Varchar(length=63, unique=True, index=True)
    owner = ForeignKey(User, on_delete=OnDelete.cascade, null=False, index=True)
    # A private bucket's blobs may be held only by its owner's browsers (and the appliance).
    private = Boolean(default=True)
    created_at = Timestamptz()


class StoredObject(Table, tablename="pmrfs_object"):
    bucket = ForeignKey(Bucket, on_delete=OnDelete.cascade, null=False, index=True)
    # "<bucket id>/<key>": one object per key in a bucket, enforced by a unique index.
    slot = Varchar(length=1100, unique=True)
    # Path-like, at most 1024 bytes of UTF-8 (see names.py).
    key = Varchar(length=1024, index=True)
    size = BigInt()
    content_type = Varchar(length=255, default="application/octet-stream")
    created_at = Timestamptz()
    # Pinned objects keep their appliance copy whatever the browsers hold.
    pinned = Boolean(default=True)
    # "shuffle": a run's saved stage output whose blobs are in the shuffle format; it is read back
    # in its content type (transcoding.py). "": the blobs are the object's bytes.
    encoding = Varchar(length=32, default="")


class Blob(Table, tablename="pmrfs_blob"):
    """A content-addressed piece of at most BLOB_SIZE bytes, shared by every object that contains it."""

    sha256 = Varchar(length=64, unique=True, index=True)
    size = Integer()
    created_at = Timestamptz()


class ObjectBlob(Table, tablename="pmrfs_object_blob"):
    """The blobs of an object, in order. Deleting the object drops these references."""

    stored_object = ForeignKey(StoredObject, on_delete=OnDelete.cascade, null=False, index=True)
    position = Integer()
    # RESTRICT: a blob some object still references can never be collected.
    blob = ForeignKey(Blob, on_delete=OnDelete.restrict, null=False, index=True)


class Replica(Table, tablename="pmrfs_replica"):
    """One copy of a blob: on the appliance's disk (holder "appliance") or in a worker browser (its worker id)."""

    blob = ForeignKey(Blob, on_delete=OnDelete.cascade, null=False, index=True)
    holder = Varchar(length=64, index=True)
    # "<blob id>:<holder>": at most one replica per holder.
    slot = Varchar(length=100, unique=True)
    added_at = Timestamptz()
    # When the holder reported the blob stored and verified; None while a transfer is under way.
    confirmed_at = Timestamptz(null=True, default=None)
