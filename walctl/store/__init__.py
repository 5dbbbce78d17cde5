"""Object stores for walctl: a local directory (the embedded default) and S3, behind one interface.

``open_store(url)`` picks the backend from the URL. Importing this package does
not import boto3; the S3 store does that on its first request.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit

from walctl.errors import NotFoundError, UsageError
from walctl.lazynames import module_getattr
from walctl.store.base import (
    MIN_PART_BYTES,
    MULTIPART_THRESHOLD_BYTES,
    ObjectInfo,
    PreconditionFailed,
    RequestStats,
    S3Settings,
    Store,
    check_key,
    check_prefix,
)
from walctl.store.local import LocalStore

# walctl.store.s3 (with logging, sockets and thread pools) is imported when first needed: a command
# on a local store never loads it. ``from walctl.store import S3Store`` still works (__getattr__).

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# Something that looks like the start of a URL but is not a well-formed one: "s3:/bucket",
# "s3:bucket", "S3//bucket", "file:/dir", "gs:bucket". Taken as a directory, it would silently
# become a local store named "s3:" (issue 16); a directory really named so is "./s3:bucket".
_SCHEME_LIKE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):|^(s3|file)/+", re.IGNORECASE)
KNOWN_SCHEMES = ("s3", "file")
URL_HINT = "use s3://bucket/prefix, file:///absolute/dir or a directory path"


def check_url(url: str) -> None:
    """Refuse (exit 2) an empty store URL, one with a mistyped or unknown scheme, an s3:// URL with no
    bucket or a file:// URL that is not an absolute path on this host. Syntax only: opens nothing."""
    if not isinstance(url, str) or not url.strip():
        raise UsageError("empty store URL", hint=URL_HINT)
    match = _SCHEME.match(url)
    if match is not None:
        scheme = match.group(1).lower()
        if scheme not in KNOWN_SCHEMES:
            raise UsageError(f"unsupported store URL scheme {scheme!r}", where=url, hint=URL_HINT)
        if scheme == "s3" and not url[match.end():].partition("/")[0]:
            raise UsageError("S3 store URL has no bucket", where=url, hint="use s3://bucket or s3://bucket/prefix")
        if scheme == "file":
            parts = urlsplit(url)
            if parts.netloc not in ("", "localhost"):
                raise UsageError("file URL names another host", where=url, hint="use file:///absolute/dir")
            if not unquote(parts.path).startswith("/"):
                raise UsageError("file URL needs an absolute path", where=url, hint="use file:///absolute/dir")
        return
    typo = _SCHEME_LIKE.match(url)
    if typo is not None:
        scheme = (typo.group(1) or typo.group(2)).lower()
        known = scheme in KNOWN_SCHEMES
        what = (f"malformed store URL: {scheme!r} needs '{scheme}://'" if known
                else f"unsupported store URL scheme {scheme!r}")
        fix = f"use {scheme}://..." if known else URL_HINT
        raise UsageError(what, where=url, hint=f"{fix}; a local directory with ':' in its name: ./{url}")


def open_store(url: str, *, endpoint_url: str | None = None, create: bool = True,
               missing_ok: bool = False, s3: S3Settings | None = None) -> Store:
    """Open the store a URL names.

    ``s3://bucket[/prefix]`` is an S3Store (``endpoint_url`` for MinIO, Ceph,
    moto...; ``s3``: its retry budget, timeouts and warning callback, the commands'
    --retry-for, --s3-connect-timeout and --s3-read-timeout; without it, botocore's
    standard 5 attempts); ``file:///abs/dir`` or a plain path is a LocalStore, created if
    missing when ``create`` (commands that only read pass False: they never create
    anything); with ``missing_ok`` too, a missing directory is an empty store, not
    created (``store_exists`` tells). ``endpoint_url`` and ``s3`` are ignored for a local store.

    Raises:
        UsageError: an empty URL, an unknown or mistyped scheme (``s3:/b``), or a
            malformed bucket/prefix/path.
        NotFoundError: a local store directory is missing and ``create`` is False.
    """
    check_url(url)
    match = _SCHEME.match(url)
    if match is None:
        return _local(url, create, missing_ok)
    scheme = match.group(1).lower()
    if scheme == "s3":  # check_url saw a bucket
        bucket, _, prefix = url[match.end():].partition("/")
        from walctl.store.s3 import S3Store

        if s3 is None:
            return S3Store(bucket, prefix.strip("/"), endpoint_url=endpoint_url)
        return S3Store(bucket, prefix.strip("/"), endpoint_url=endpoint_url, retry_for_s=s3.retry_for_s,
                       connect_timeout_s=s3.connect_timeout_s, read_timeout_s=s3.read_timeout_s,
                       on_warning=s3.on_warning)
    if scheme == "file":  # check_url saw an absolute path on this host
        return _local(os.path.normpath(unquote(urlsplit(url).path)), create, missing_ok)
    raise UsageError(f"unsupported store URL scheme {scheme!r}", where=url, hint=URL_HINT)


def store_exists(store: Store) -> bool:
    """False only for a local store whose directory is missing (opened with ``missing_ok``)."""
    return not isinstance(store, LocalStore) or os.path.isdir(store.root)


def _local(path: str, create: bool, missing_ok: bool = False) -> LocalStore:
    try:
        return LocalStore(path, create=create, missing_ok=missing_ok)
    except NotFoundError as exc:
        exc.hint = exc.hint or "check --store; a store is created by the first 'walctl upload'"
        raise


__getattr__ = module_getattr(__name__, {"S3Store": "s3"}, globals())


__all__ = [
    "LocalStore",
    "MIN_PART_BYTES",
    "MULTIPART_THRESHOLD_BYTES",
    "ObjectInfo",
    "PreconditionFailed",
    "RequestStats",
    "S3Settings",
    "S3Store",
    "Store",
    "check_key",
    "check_prefix",
    "check_url",
    "open_store",
    "store_exists",
]
