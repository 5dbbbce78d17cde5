"""Object stores for walctl: a local directory (the embedded default) and S3, behind one interface.

``open_store(url)`` picks the backend from the URL. Importing this package does
not import boto3; the S3 store does that on its first request.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit

from walctl.errors import UsageError
from walctl.store.base import (
    MIN_PART_BYTES,
    MULTIPART_THRESHOLD_BYTES,
    ObjectInfo,
    PreconditionFailed,
    RequestStats,
    Store,
    check_key,
    check_prefix,
)
from walctl.store.local import LocalStore
from walctl.store.s3 import S3Store

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def open_store(url: str, *, endpoint_url: str | None = None) -> Store:
    """Open the store a URL names.

    ``s3://bucket[/prefix]`` is an S3Store (``endpoint_url`` for MinIO, Ceph,
    moto...); ``file:///abs/dir`` or a plain path is a LocalStore, created if
    missing. ``endpoint_url`` is ignored for a local store.

    Raises:
        UsageError: an empty URL, another scheme, or a malformed bucket/prefix/path.
    """
    if not isinstance(url, str) or not url.strip():
        raise UsageError("empty store URL", hint="use s3://bucket/prefix or a directory")
    match = _SCHEME.match(url)
    if match is None:
        return LocalStore(url)
    scheme = match.group(1).lower()
    if scheme == "s3":
        rest = url[match.end():]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise UsageError("S3 store URL has no bucket", where=url,
                             hint="use s3://bucket or s3://bucket/prefix")
        return S3Store(bucket, prefix.strip("/"), endpoint_url=endpoint_url)
    if scheme == "file":
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise UsageError("file URL names another host", where=url,
                             hint="use file:///absolute/dir")
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise UsageError("file URL needs an absolute path", where=url,
                             hint="use file:///absolute/dir")
        return LocalStore(os.path.normpath(path))
    raise UsageError(f"unsupported store URL scheme {scheme!r}", where=url,
                     hint="use s3://bucket/prefix, file:///dir or a directory path")


__all__ = [
    "LocalStore",
    "MIN_PART_BYTES",
    "MULTIPART_THRESHOLD_BYTES",
    "ObjectInfo",
    "PreconditionFailed",
    "RequestStats",
    "S3Store",
    "Store",
    "check_key",
    "check_prefix",
    "open_store",
]
