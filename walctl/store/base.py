"""The one small interface every object store implements (a local directory, S3).

Keys are relative to the store's root or prefix, '/'-separated, never starting
with '/', with no empty, '.' or '..' components; ``check_key`` enforces that
before any backend sees a key, so a key means the same object everywhere.

Read semantics are those of ``pread`` on an immutable file: ``read_range`` and
``read_tail`` return fewer bytes when the object ends first, and the decoders
above raise TruncatedError with the position they know.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields
from typing import Callable, Iterable, Protocol, Sequence, runtime_checkable

# Multipart sizes, re-exported under the names callers use (walctl.defaults says why each
# is what it is): put_large makes one PUT at or below the threshold, parts above it.
from walctl.defaults import (  # noqa: F401
    DEFAULT_PART_BYTES,
    MAX_PART_BYTES,
    MAX_PARTS,
    MIN_PART_BYTES,
    MULTIPART_THRESHOLD_BYTES,
)
from walctl.defaults import DEFAULT_S3_CONNECT_TIMEOUT_S, DEFAULT_S3_READ_TIMEOUT_S, DEFAULT_S3_RETRY_FOR_S
from walctl.errors import RefusedError, UsageError

# Names of in-progress files in a local store; no key component may start with
# it, so listing can skip them and a crash never exposes half an object.
TEMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class ObjectInfo:
    """One object as ``list`` reports it."""

    key: str
    size: int


class PreconditionFailed(RefusedError):
    """A create-only put lost: the key already exists (S3 412, local EEXIST)."""


@dataclass(frozen=True)
class S3Settings:
    """How an S3 store rides out an outage or a silent endpoint: the commands' ``--retry-for``,
    ``--s3-connect-timeout`` and ``--s3-read-timeout`` (walctl.defaults says why the defaults are
    what they are). A local store ignores them.

    Attributes:
        retry_for_s: a request failing transiently (connection refused, reset or closed, a
            timeout, 5xx, throttling) is retried with backoff until this long after its first
            attempt; 0: botocore's standard 5 attempts only.
        connect_timeout_s: to open a connection (and to send each piece of a request body).
        read_timeout_s: of silence while waiting for an answer's bytes.
        on_warning: told (one line, no 'walctl: warning:' prefix) when a request starts being
            retried past its 5 quick attempts, and when it succeeds again.
    """

    retry_for_s: float = DEFAULT_S3_RETRY_FOR_S
    connect_timeout_s: float = DEFAULT_S3_CONNECT_TIMEOUT_S
    read_timeout_s: float = DEFAULT_S3_READ_TIMEOUT_S
    on_warning: Callable[[str], None] | None = None


@dataclass(frozen=True)
class CopySource:
    """Bytes [start, end) of an object already in the same store: a piece for ``compose``."""

    key: str
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass
class RequestStats:
    """Requests a store made, by kind, and the bytes it moved.

    S3 counts every HTTP attempt (retries included, also in ``retries``); the
    local store counts one per call. Multipart create/complete count as ``put``,
    abort as ``delete``, listing open uploads as ``list``. ``copy_parts`` and
    ``bytes_copied`` count server-side copies (S3 UploadPartCopy, local
    copy_file_range): bytes that never passed through this process.
    """

    get: int = 0
    put: int = 0
    list: int = 0
    delete: int = 0
    head: int = 0
    multipart_parts: int = 0
    ranged_gets: int = 0
    retries: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    copy_parts: int = 0
    bytes_copied: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, amount: int = 1) -> None:
        """Add ``amount`` to the counter ``name``; safe from several threads."""
        with self._lock:
            setattr(self, name, getattr(self, name) + amount)

    @property
    def requests(self) -> int:
        """All requests (ranged gets are already counted in ``get``)."""
        return (self.get + self.put + self.list + self.delete + self.head + self.multipart_parts
                + self.copy_parts)

    def snapshot(self) -> dict[str, int]:
        """The counters as a plain dict (for JSON output and test assertions)."""
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}

    def reset(self) -> None:
        with self._lock:
            for f in fields(self):
                if not f.name.startswith("_"):
                    setattr(self, f.name, 0)


@dataclass(frozen=True)
class StoreCapabilities:
    """What a store can do beyond the Store protocol's methods: callers ask this, never
    ``hasattr``/``isinstance`` on a store (issue 29 item 2).

    Attributes:
        server_side_copy: ``compose`` copies CopySources inside the store (S3 UploadPartCopy for
            parts of at least ``min_part_bytes``, local copy_file_range).
        min_part_bytes: the smallest part of a multipart object but the last (S3: 5 MiB; local: 1).
        copies_small_parts_through: ``compose`` reads and re-writes sources in parts under
            ``min_part_bytes`` (S3); False where every byte is copied in place (local).
        lends_views: ``read_range_view``/``read_tail_view`` lend memoryviews of the object's bytes
            (a local store's mapped files) instead of copying them into new bytes.
        reads_into: ``read_range_into(key, start, end, buf)`` reads straight into a caller's buffer.
        executor_url: the URL a process on another host or cwd opens the same store by (a local
            store's absolute path; None: the URL the user gave works everywhere).
    """

    server_side_copy: bool = False
    min_part_bytes: int = 1
    copies_small_parts_through: bool = False
    lends_views: bool = False
    reads_into: bool = False
    executor_url: str | None = None


@runtime_checkable
class Store(Protocol):
    """What the manifest, upload, GC and compaction code need from an object store."""

    url: str              # "s3://bucket/prefix" or "/abs/dir"
    stats: RequestStats
    capabilities: StoreCapabilities  # what it can do beyond these methods

    def size(self, key: str) -> int:
        """The object's size in bytes. Raises NotFoundError."""

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) in one request (fewer if the object ends first). Raises NotFoundError."""

    def read_tail(self, key: str, length: int) -> tuple[bytes, int]:
        """The last ``length`` bytes (all if shorter) and the object's size, in one request."""

    def read_all(self, key: str) -> bytes:
        """The whole object. Raises NotFoundError."""

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        """Store ``data`` under ``key`` atomically; ``if_absent`` raises PreconditionFailed if it exists."""

    def put_large(self, key: str, data: bytes | Iterable[bytes], *,
                  part_size: int = DEFAULT_PART_BYTES) -> None:
        """Store a large object: multipart above 32 MiB, aborted on failure; one put below."""

    def compose(self, key: str, pieces: Sequence[bytes | CopySource]) -> None:
        """Store the concatenation of ``pieces`` under ``key``, atomically (whole or not at all).

        A ``CopySource`` is copied inside the store where the backend can (S3 UploadPartCopy
        for every part of at least 5 MiB, local copy_file_range) and read and re-written only
        where it cannot (S3 parts below the 5 MiB minimum). Raises NotFoundError for a missing
        source, CorruptionError for a source shorter than its range.
        """

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Objects whose key starts with ``prefix``, sorted by key."""

    def delete(self, key: str) -> None:
        """Remove the object; a missing one is fine."""

    # An object whose parts several processes write (compaction's Spark tasks): the driver creates
    # it, each task (its own store, opened from the URL) puts its part, the driver completes or
    # aborts it (walctl.store.multipart).
    def create_multipart(self, key: str) -> str:
        """Start the object; returns its upload id."""

    def put_part(self, key: str, upload_id: str, number: int, chunks: Iterable, position: int,
                 size: int | None = None) -> dict:
        """Put part ``number`` (1-based) made of ``chunks``, at object byte ``position``; its record
        for ``complete_multipart``. ``chunks`` may be an iterator when ``size`` (their total) is
        given: a local store writes each before it asks for the next."""

    def complete_multipart(self, key: str, upload_id: str, parts: list[dict]) -> None:
        """Make the object whole from the parts' records (any order; parts 1..n, else IOFailure)."""

    def abort_multipart(self, key: str, upload_id: str) -> None:
        """Drop the upload and its parts; never raises."""


def _check_components(text: str, what: str, *, allow_trailing_slash: bool) -> None:
    if "\x00" in text:
        raise UsageError(f"{what} contains a NUL byte: {text!r}")
    if text.startswith("/"):
        raise UsageError(f"{what} must be relative (no leading '/'): {text!r}")
    parts = text.split("/")
    if allow_trailing_slash and parts and parts[-1] == "":
        parts = parts[:-1]
    for part in parts:
        if part in ("", ".", ".."):
            raise UsageError(f"{what} has an empty, '.' or '..' component: {text!r}")
        if part.startswith(TEMP_PREFIX):
            raise UsageError(f"{what} component may not start with {TEMP_PREFIX!r}: {text!r}")


def check_key(key: str) -> str:
    """Return ``key`` if it is a valid object key, else raise UsageError."""
    if not isinstance(key, str) or not key:
        raise UsageError(f"object key must be a non-empty string: {key!r}")
    _check_components(key, "object key", allow_trailing_slash=False)
    return key


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` if it may start a key ('' and a trailing '/' allowed), else raise UsageError."""
    if not isinstance(prefix, str):
        raise UsageError(f"key prefix must be a string: {prefix!r}")
    if prefix:
        # The last component may be partial ("manifest/0000"); it is checked like
        # the others, which is stricter than needed only for names starting "..".
        _check_components(prefix, "key prefix", allow_trailing_slash=True)
    return prefix


def check_range(start: int, end: int) -> None:
    """A byte range [start, end) must be non-negative and not reversed."""
    if start < 0 or end < start:
        raise UsageError(f"bad byte range [{start}, {end})")


def iter_chunks(data: bytes | Iterable[bytes]) -> Iterable[bytes]:
    """``data`` as a stream of byte chunks (a bytes-like value is one chunk)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        yield bytes(data) if not isinstance(data, bytes) else data
        return
    for chunk in data:
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise UsageError(f"put_large: chunks must be bytes, got {type(chunk).__name__}")
        yield bytes(chunk) if not isinstance(chunk, bytes) else chunk


def check_part_size(part_size: int) -> None:
    if part_size < MIN_PART_BYTES:
        raise UsageError(f"multipart part size {part_size} bytes is below S3's minimum "
                         f"of {MIN_PART_BYTES} bytes (5 MiB)")
