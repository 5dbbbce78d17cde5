"""A store in an S3 bucket under a prefix (AWS S3, MinIO, Ceph RGW, R2, moto).

boto3 is imported only when the first request is made, so commands that never
touch S3 (and ``walctl --help``) do not pay for it. Credentials come from
boto3's usual chain; the endpoint from ``endpoint_url``, ``AWS_ENDPOINT_URL_S3``
or ``AWS_ENDPOINT_URL``. Error messages name the bucket, key, S3 error code and
HTTP status only: never credentials, signed headers or presigned URLs.

Retries are made here, not by botocore (its client makes one HTTP attempt per
call): a transient failure (connection refused, reset or closed, a connect or read
timeout, 5xx, 429 and throttling codes) is tried again with botocore's standard
backoff (full jitter, 50 ms doubling; 1 s doubling when throttled; at most 2 s). With
``retry_for_s`` 0 a call makes at most ``max_attempts`` attempts (5, botocore's
standard, within about a second); with ``retry_for_s`` > 0 it goes on until that long
has passed since its first attempt (no attempt starts later), so an outage of the
endpoint is ridden out, and ``on_warning`` hears once when a call goes past its quick
attempts and once when it succeeds again. A response body cut short is retried the
same way (one budget with its GetObject), pinned to the first response's ETag.
Other failures (403, 404, 412, 416, bad parameters) are never retried.
"""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any, Callable, Iterable, Iterator, Sequence
from urllib.parse import urlsplit

from walctl.defaults import DEFAULT_S3_CONNECT_TIMEOUT_S, DEFAULT_S3_READ_TIMEOUT_S
from walctl.errors import IOFailure, NotFoundError, UsageError, WalctlError
from walctl.store import multipart
from walctl.store.base import (
    DEFAULT_PART_BYTES,
    MIN_PART_BYTES,
    CopySource,
    MULTIPART_THRESHOLD_BYTES,
    ObjectInfo,
    PreconditionFailed,
    RequestStats,
    StoreCapabilities,
    check_key,
    check_part_size,
    check_prefix,
    check_range,
    iter_chunks,
)

# botocore's standard mode: the attempts a call makes quickly (within about a second) before
# it gives up (retry_for_s 0) or says on stderr that it goes on retrying (retry_for_s > 0).
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_CONNECT_TIMEOUT_S = DEFAULT_S3_CONNECT_TIMEOUT_S
DEFAULT_READ_TIMEOUT_S = DEFAULT_S3_READ_TIMEOUT_S
# Backoff before attempt n+1: rand(0, 1) * min(base * 2**(n-1), cap), botocore's standard
# schedule (base 50 ms; 1 s for throttling), capped at 2 s so that an endpoint back after an
# outage is found within about 2 s while a long outage costs one request a second on average.
_BACKOFF_BASE_S = 0.05
_THROTTLED_BASE_S = 1.0
_MAX_BACKOFF_S = 2.0
# A call still failing after this long is said on stderr even before its quick attempts are
# spent: a silent endpoint's read timeouts make few, slow attempts.
_WARN_AFTER_S = 2.0
# S3's own page size; tests pass a small value to exercise pagination.
DEFAULT_MAX_KEYS = 1000

# Which counter each S3 operation's HTTP requests go to.
_OP_STAT = {
    "GetObject": "get",
    "HeadObject": "head",
    "PutObject": "put",
    "CreateMultipartUpload": "put",
    "CompleteMultipartUpload": "put",
    "UploadPart": "multipart_parts",
    "UploadPartCopy": "copy_parts",
    "AbortMultipartUpload": "delete",
    "DeleteObject": "delete",
    "ListObjectsV2": "list",
    "ListMultipartUploads": "list",
}

# boto3's method name for each operation.
_OP_METHOD = {
    "GetObject": "get_object",
    "HeadObject": "head_object",
    "PutObject": "put_object",
    "CreateMultipartUpload": "create_multipart_upload",
    "CompleteMultipartUpload": "complete_multipart_upload",
    "UploadPart": "upload_part",
    "UploadPartCopy": "upload_part_copy",
    "AbortMultipartUpload": "abort_multipart_upload",
    "DeleteObject": "delete_object",
    "ListObjectsV2": "list_objects_v2",
    "ListMultipartUploads": "list_multipart_uploads",
}

_NOT_FOUND_CODES = {"NoSuchKey", "NotFound", "404"}
_PRECONDITION_CODES = {"PreconditionFailed", "ConditionalRequestConflict"}
_ACCESS_CODES = {"AccessDenied", "403", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                 "ExpiredToken", "InvalidToken", "AllAccessDisabled", "AccountProblem"}
# botocore's standard mode's transient and throttling codes (the S3 ones); 5xx and 429 are
# transient whatever their code.
_TRANSIENT_CODES = {"RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete",
                    "InternalError", "ServiceUnavailable"}
_THROTTLING_CODES = {"SlowDown", "Throttling", "ThrottlingException", "ThrottledException",
                     "RequestThrottled", "RequestThrottledException", "TooManyRequestsException",
                     "RequestLimitExceeded", "BandwidthLimitExceeded", "LimitExceededException"}


class _RangeNotSatisfiable(IOFailure):
    """HTTP 416: the range starts at or past the end of the object (handled by the readers)."""


class _Retry:
    """The retry budget of one S3 call (or of a GET and the reads of its body): which failures
    are tried again, the backoff before each, when to say so and when to give up."""

    def __init__(self, store: "S3Store", op: str, key: str | None, *, quick: bool = False):
        self.store, self.op, self.key = store, op, key
        # Once a call has spent a whole budget, the endpoint is taken as away: the calls after it
        # (a roll-back, an abort, the next poll) make one attempt each until one gets through, so
        # a failing command ends within one budget, not one per clean-up call.
        self.after_outage = not quick and store.retry_for_s > 0 and store._unreachable
        quick = quick or self.after_outage
        self.retry_for_s = 0.0 if quick else store.retry_for_s
        self.max_attempts = 1 if quick else store.max_attempts
        self.failures = 0
        self.started = time.monotonic()
        self.warned = False

    def again(self, exc: BaseException) -> bool:
        """After a failed attempt: sleep the backoff and return True to try again, or return
        False (at once) for a failure that is not transient or once the budget is spent (with
        ``retry_for_s``, no attempt starts after it, and the last one starts at its end)."""
        self.failures += 1
        if not _transient(exc):
            return False
        delay = random.random() * min(
            (_THROTTLED_BASE_S if _throttled(exc) else _BACKOFF_BASE_S) * 2 ** (self.failures - 1),
            _MAX_BACKOFF_S)
        elapsed = time.monotonic() - self.started
        if self.retry_for_s <= 0:
            if self.failures >= self.max_attempts:
                return False
        elif elapsed >= self.retry_for_s:
            return False
        else:
            delay = min(delay, self.retry_for_s - elapsed)  # the last attempt starts at the budget's end
        if (self.retry_for_s > 0 and not self.warned
                and (self.failures >= self.max_attempts or elapsed >= _WARN_AFTER_S)):
            self.warned = True
            self.store._warn(f"S3 {self.op} failing ({_failure_text(exc, self.store)}); retrying "
                             f"for up to {_seconds(self.retry_for_s)} (--retry-for)")
        time.sleep(delay)
        return True

    def succeeded(self) -> None:
        if self.warned:
            self.warned = False
            self.store._warn(f"S3 {self.op} succeeded again after {self.failures} failed "
                             f"attempt{'s' if self.failures != 1 else ''} in "
                             f"{_seconds(time.monotonic() - self.started)}")

    def gave_up(self) -> str:
        """The hint of the error that ends the call (how long it tried); marks the store
        unreachable when the call spent a whole budget."""
        tries = f"gave up after {self.failures} attempt{'s' if self.failures != 1 else ''}"
        if self.retry_for_s > 0:
            self.store._unreachable = True
            tries += (f" in {_seconds(time.monotonic() - self.started)} (--retry-for "
                      f"{_seconds(self.retry_for_s)})")
        elif self.after_outage:
            tries += ", as an earlier request spent --retry-for on this endpoint"
        return tries


def _transient(exc: BaseException) -> bool:
    """A failure worth another attempt: the network, a timeout, 5xx, throttling."""
    from botocore import exceptions as bce

    if isinstance(exc, bce.ClientError):
        code, status = _code_status(exc)
        return (status is not None and (status >= 500 or status == 429)
                or code in _TRANSIENT_CODES or code in _THROTTLING_CODES)
    return isinstance(exc, (bce.ConnectionError, bce.HTTPClientError, bce.IncompleteReadError))


def _throttled(exc: BaseException) -> bool:
    from botocore import exceptions as bce

    if not isinstance(exc, bce.ClientError):
        return False
    code, status = _code_status(exc)
    return status == 429 or code in _THROTTLING_CODES


def _code_status(exc: Any) -> tuple[str, int | None]:
    error = exc.response.get("Error", {}) or {}
    status = (exc.response.get("ResponseMetadata", {}) or {}).get("HTTPStatusCode")
    return str(error.get("Code", "") or ""), status


def _client_error(exc: Any, op: str, where: str) -> WalctlError:
    """The walctl error for an S3 error response that is not worth a retry."""
    error = exc.response.get("Error", {}) or {}
    code = str(error.get("Code", "") or "")
    status = (exc.response.get("ResponseMetadata", {}) or {}).get("HTTPStatusCode")
    label = _client_error_label(exc)
    if code in _PRECONDITION_CODES or status == 412:
        return PreconditionFailed("object already exists", where=where, hint=f"S3 {op}: {label}")
    if code == "NoSuchBucket":
        return NotFoundError("no such bucket", where=where, hint="check the bucket name in --store, and --endpoint-url")
    if code in _NOT_FOUND_CODES or (status == 404 and code != "NoSuchUpload"):
        return NotFoundError("no such object", where=where)
    if code == "InvalidRange" or status == 416:
        return _RangeNotSatisfiable(f"S3 {op}: range not satisfiable", where=where)
    if code in _ACCESS_CODES or status == 403:
        return IOFailure(f"S3 {op} refused: {label}", where=where, hint="access denied")
    return IOFailure(f"S3 {op} failed: {label}", where=where)


def _client_error_label(exc: Any) -> str:
    code, status = _code_status(exc)
    return f"{code or 'error'} (HTTP {status})" if status else (code or "error")


def _failure_text(exc: BaseException, store: "S3Store") -> str:
    """What went wrong, in a few words, for the warning line (no URL: it could hold a secret)."""
    from botocore import exceptions as bce

    if isinstance(exc, bce.ClientError):
        return _client_error_label(exc)
    if isinstance(exc, bce.ReadTimeoutError):
        return f"no answer within {_seconds(store.read_timeout_s)}"
    if isinstance(exc, bce.ConnectTimeoutError):
        return f"no connection within {_seconds(store.connect_timeout_s)}"
    if isinstance(exc, bce.EndpointConnectionError):
        cause = str(getattr(exc, "kwargs", {}).get("error", "")).lower()
        return "connection refused" if "refused" in cause else "cannot connect"
    if isinstance(exc, bce.ConnectionClosedError):
        return "connection closed"
    if isinstance(exc, (bce.IncompleteReadError, bce.ResponseStreamingError)):
        return "answer cut short"
    return type(exc).__name__


def _seconds(value: float) -> str:
    """30s, 1m, 2.5s, 90s: durations as the options take them."""
    if value >= 60 and value % 60 == 0:
        return f"{int(value // 60)}m"
    if value >= 10 or value == int(value):
        return f"{value:.0f}s"
    return f"{value:.1f}s"


class S3Store:
    """Objects in ``s3://bucket/prefix``."""

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 client: Any = None, max_keys: int = DEFAULT_MAX_KEYS,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 retry_for_s: float = 0.0,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
                 on_warning: Callable[[str], None] | None = None,
                 multipart_threshold_bytes: int = MULTIPART_THRESHOLD_BYTES):
        """Describe the store; no request is made and boto3 is not imported until one is.

        Args:
            client: a ready boto3 S3 client (the retries here come on top of its own).
            max_keys: page size of ListObjectsV2 (S3 caps it at 1000).
            max_attempts: quick HTTP attempts per request, the first included: all of them
                with ``retry_for_s`` 0; past them, ``on_warning`` is told.
            retry_for_s: retry a transiently failing request until this long after its first
                attempt (0: ``max_attempts`` only). The commands pass --retry-for (30 s).
            connect_timeout_s, read_timeout_s: botocore's, per HTTP attempt.
            on_warning: one line when a request goes on retrying past its quick attempts,
                and when it succeeds again (None: silent).
            multipart_threshold_bytes: put_large uses one PUT up to this size.
        """
        if not bucket or "/" in bucket:
            raise UsageError(f"bad S3 bucket name: {bucket!r}")
        prefix = (prefix or "").strip("/")
        if prefix:
            check_prefix(prefix)
        if not 1 <= max_keys <= 1000:
            raise UsageError(f"max_keys must be in [1, 1000], got {max_keys}")
        if max_attempts < 1:
            raise UsageError(f"max_attempts must be at least 1, got {max_attempts}")
        if retry_for_s < 0 or connect_timeout_s <= 0 or read_timeout_s <= 0:
            raise UsageError(f"bad S3 retry budget or timeout: {retry_for_s}, {connect_timeout_s}, "
                             f"{read_timeout_s} s")
        self.bucket = bucket
        self.prefix = prefix
        self.url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        self.endpoint_url = endpoint_url
        self.max_keys = max_keys
        self.max_attempts = max_attempts
        self.retry_for_s = retry_for_s
        self.on_warning = on_warning
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.multipart_threshold_bytes = multipart_threshold_bytes
        self.stats = RequestStats()
        self.capabilities = StoreCapabilities(server_side_copy=True, min_part_bytes=MIN_PART_BYTES,
                                              copies_small_parts_through=True)
        self._client = None
        self._client_lock = threading.Lock()
        self._local = threading.local()   # HTTP attempts of the current call, per thread
        self._unreachable = False  # a call spent its whole retry budget, and none succeeded since
        if client is not None:
            self._install_hooks(client)
            self._client = client

    def __repr__(self) -> str:
        return f"S3Store({self.url!r})"

    # -- the client ------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The boto3 S3 client, created on first use."""
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = self._make_client()
        return self._client

    def _resolved_endpoint(self) -> str | None:
        return (self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3")
                or os.environ.get("AWS_ENDPOINT_URL") or None)

    def _make_client(self) -> Any:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError

        config = Config(
            # One HTTP attempt per call: _call retries (botocore's own retries would make
            # 5 attempts of a read timeout each, and could not stop at the retry budget).
            retries={"mode": "standard", "total_max_attempts": 1},
            connect_timeout=self.connect_timeout_s,
            read_timeout=self.read_timeout_s,
            max_pool_connections=16,
            user_agent_extra="walctl",
        )
        try:
            # A session of our own: boto3's default session is not thread-safe.
            session = boto3.session.Session()
            client = session.client("s3", endpoint_url=self._resolved_endpoint(), config=config)
        except BotoCoreError as exc:
            raise UsageError(f"cannot set up the S3 client: {type(exc).__name__}",
                             where=self.url, hint=_safe_text(exc)) from exc
        except ValueError as exc:  # a malformed endpoint URL
            raise UsageError("cannot set up the S3 client: bad endpoint URL",
                             where=self.url) from exc
        self._install_hooks(client)
        return client

    def _install_hooks(self, client: Any) -> None:
        # before-send fires once per HTTP attempt, retries included, in the
        # calling thread, just before the request goes on the wire.
        client.meta.events.register("before-send.s3", self._on_before_send,
                                    unique_id=f"walctl-stats-{id(self)}")

    def _on_before_send(self, request: Any = None, event_name: str = "", **_: Any) -> None:
        op = event_name.rsplit(".", 1)[-1]
        name = _OP_STAT.get(op)
        if name is not None:
            self.stats.add(name)
        if op == "GetObject" and request is not None and "Range" in request.headers:
            self.stats.add("ranged_gets")
        self._local.attempts = getattr(self._local, "attempts", 0) + 1
        return None  # a non-None return would replace the HTTP request

    # -- names -----------------------------------------------------------------

    def _full_key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _where(self, key: str | None) -> str:
        return f"{self.url}/{key}" if key else self.url

    # -- calls and errors ------------------------------------------------------

    def _call(self, op: str, key: str | None, *, _retry: "_Retry | None" = None,
              **kwargs: Any) -> dict:
        """Make one S3 call, retried per the store's budget (module docstring), and map its
        failure to a walctl error.

        The error carries ``attempts``: how many HTTP requests the call made (conditional
        writes tell their own lost answer from someone else's object by it). ``_retry``: the
        budget of a larger operation this call belongs to (a GET and the reads of its body);
        one of its own otherwise.
        """
        method = getattr(self.client, _OP_METHOD[op])
        retry = _retry if _retry is not None else _Retry(self, op, key)
        self._local.attempts = 0
        try:
            while True:
                try:
                    resp = method(**kwargs)
                except Exception as exc:
                    if retry.again(exc):
                        continue
                    attempts = self._local.attempts
                    err = self._map_error(exc, op, key, retry)
                    if err is None:
                        raise
                    err.attempts = attempts
                    raise err from exc
                self._unreachable = False
                if _retry is None:  # (a shared budget is the caller's to close)
                    retry.succeeded()
                return resp
        finally:
            if self._local.attempts > 1:
                self.stats.add("retries", self._local.attempts - 1)

    def _warn(self, message: str) -> None:
        if self.on_warning is not None:
            self.on_warning(f"{self.url}: {message}")

    def _map_error(self, exc: Exception, op: str, key: str | None,
                   retry: "_Retry") -> WalctlError | None:
        """The walctl error for a boto3/botocore failure, or None for one that is a bug."""
        from botocore import exceptions as bce

        where = self._where(key)
        if isinstance(exc, WalctlError):
            return exc
        if _transient(exc):
            tries = retry.gave_up()
            if isinstance(exc, bce.ClientError):
                return IOFailure(f"S3 {op} failed: {_client_error_label(exc)}", where=where, hint=tries)
            return IOFailure(f"S3 {op} failed: network error ({type(exc).__name__})",
                             where=where, hint=f"{tries} to {self._endpoint_host()}")
        if isinstance(exc, bce.ClientError):
            return _client_error(exc, op, where)
        if isinstance(exc, (bce.NoCredentialsError, bce.PartialCredentialsError,
                            bce.CredentialRetrievalError)):
            return IOFailure("no usable S3 credentials", where=where,
                             hint="configure boto3's credential chain, e.g. AWS_ACCESS_KEY_ID "
                                  "and AWS_SECRET_ACCESS_KEY or a profile")
        if isinstance(exc, bce.NoRegionError):
            return UsageError("no AWS region configured", where=where,
                              hint="set AWS_DEFAULT_REGION or a profile's region")
        if isinstance(exc, bce.ParamValidationError):
            return UsageError(f"S3 {op}: invalid request parameters", where=where,
                              hint=_safe_text(exc))
        if isinstance(exc, bce.BotoCoreError):
            return IOFailure(f"S3 {op} failed: {type(exc).__name__}", where=where)
        return None

    def _endpoint_host(self) -> str:
        """The endpoint's host:port without any userinfo (which could hold a secret)."""
        endpoint = self._resolved_endpoint()
        if self._client is not None:
            endpoint = self._client.meta.endpoint_url
        if not endpoint:
            return "S3"
        parts = urlsplit(endpoint)
        host = parts.hostname or "S3"
        return f"{host}:{parts.port}" if parts.port else host

    # -- reads -----------------------------------------------------------------

    def _get(self, key: str, range_header: str | None = None) -> tuple[dict, bytes]:
        """GetObject and read its body, retrying a body cut short (same ETag only) within the
        GET's retry budget."""
        from botocore import exceptions as bce

        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self._full_key(key)}
        if range_header:
            kwargs["Range"] = range_header
        retry = _Retry(self, "GetObject", key)
        while True:
            try:
                resp = self._call("GetObject", key, _retry=retry, **kwargs)
            except PreconditionFailed as exc:
                # Only our IfMatch on a retry can fail a GET's precondition.
                raise IOFailure("object changed while being read", where=self._where(key)) from exc
            body = resp["Body"]
            try:
                data = body.read()
            except (bce.IncompleteReadError, bce.HTTPClientError) as exc:
                if not retry.again(exc):
                    raise self._map_error(exc, "GetObject", key, retry) from exc
                self.stats.add("retries")
                if resp.get("ETag"):
                    kwargs["IfMatch"] = resp["ETag"]
                continue
            finally:
                body.close()
            retry.succeeded()
            self.stats.add("bytes_read", len(data))
            return resp, data

    def size(self, key: str) -> int:
        resp = self._call("HeadObject", key, Bucket=self.bucket, Key=self._full_key(key))
        return int(resp["ContentLength"])

    def read_range(self, key: str, start: int, end: int) -> bytes:
        check_range(start, end)
        if start == end:
            self.size(key)  # still NotFoundError for a missing object
            return b""
        try:
            resp, data = self._get(key, f"bytes={start}-{end - 1}")
        except _RangeNotSatisfiable:
            return b""  # start at or past the end, as pread would say
        if not resp.get("ContentRange"):
            data = data[start:end]  # a server that ignored Range sent everything
        return data

    def read_tail(self, key: str, length: int) -> tuple[bytes, int]:
        if length < 0:
            raise UsageError(f"bad tail length {length}")
        if length == 0:
            return b"", self.size(key)  # "bytes=-0" is not a valid range
        try:
            resp, data = self._get(key, f"bytes=-{length}")
        except _RangeNotSatisfiable:
            # S3 answers a suffix range on an empty object with 416.
            return b"", self.size(key)
        content_range = resp.get("ContentRange")
        if content_range:
            # "bytes <first>-<last>/<total>"
            return data, int(content_range.rsplit("/", 1)[1])
        return data[-length:], len(data)

    def read_all(self, key: str) -> bytes:
        return self._get(key)[1]

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        check_prefix(prefix)
        base = f"{self.prefix}/" if self.prefix else ""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": base + prefix,
                                  "MaxKeys": self.max_keys}
        out: list[ObjectInfo] = []
        while True:
            resp = self._call("ListObjectsV2", prefix or None, **kwargs)
            for obj in resp.get("Contents", ()):
                key = obj["Key"][len(base):]
                if key and not key.endswith("/"):  # skip console "folder" markers
                    out.append(ObjectInfo(key, int(obj["Size"])))
            token = resp.get("NextContinuationToken")
            if not resp.get("IsTruncated") or not token:
                break
            kwargs["ContinuationToken"] = token
        out.sort(key=lambda info: info.key)
        return out

    # -- writes ----------------------------------------------------------------

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        full = self._full_key(key)
        data = bytes(data)
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": full, "Body": data}
        if if_absent:
            kwargs["IfNoneMatch"] = "*"
        try:
            self._call("PutObject", key, **kwargs)
        except PreconditionFailed as err:
            # A retried create-only PUT whose first attempt landed (its response
            # lost) sees its own object: the write happened, report success.
            if if_absent and getattr(err, "attempts", 1) > 1 and self._holds(key, data):
                self.stats.add("bytes_written", len(data))
                return
            raise
        self.stats.add("bytes_written", len(data))

    def _holds(self, key: str, data: bytes) -> bool:
        try:
            return self.read_all(key) == data
        except WalctlError:
            return False

    def put_large(self, key: str, data: bytes | Iterable[bytes], *,
                  part_size: int = DEFAULT_PART_BYTES) -> None:
        self._full_key(key)  # (checks the key before any byte is read)
        check_part_size(part_size)
        if isinstance(data, (bytes, bytearray, memoryview)):
            if len(data) <= self.multipart_threshold_bytes:
                self.put(key, data)
                return
            stream: Iterator[bytes] = iter_chunks(data)
        else:
            # Buffer just past the threshold to learn whether one PUT will do.
            chunks = iter(iter_chunks(data))
            head = bytearray()
            for chunk in chunks:
                head += chunk
                if len(head) > self.multipart_threshold_bytes:
                    break
            else:
                self.put(key, bytes(head))
                return
            stream = multipart.head_then(head, chunks)
            del head  # head_then holds it now, and lets it go once it is cut into parts
        multipart.s3_put_stream(self, key, stream, part_size)

    def compose(self, key: str, pieces: Sequence[bytes | CopySource]) -> None:
        """UploadPartCopy for every part that can be one (walctl.store.multipart.s3_compose)."""
        multipart.s3_compose(self, key, pieces)

    # -- an object written in parts by several processes (walctl.store.multipart) --

    def create_multipart(self, key: str) -> str:
        return multipart.s3_create(self, key)

    def put_part(self, key: str, upload_id: str, number: int, chunks: Iterable, position: int,
                 size: int | None = None) -> dict:
        return multipart.s3_put_part(self, key, upload_id, number, chunks, size)

    def complete_multipart(self, key: str, upload_id: str, parts: list[dict]) -> None:
        multipart.s3_complete(self, key, upload_id, multipart.ordered_parts(key, parts))

    def abort_multipart(self, key: str, upload_id: str) -> None:
        try:
            multipart.s3_abort(self, key, upload_id)
        except Exception:  # noqa: BLE001 - best effort on the way out (a lifecycle rule is the fallback)
            pass

    def _retry(self, op: str, key: str | None, *, quick: bool = False) -> "_Retry":
        """A retry budget for one operation of several calls (walctl.store.multipart)."""
        return _Retry(self, op, key, quick=quick)

    def _checksum_algorithm(self) -> str | None:
        """The checksum botocore would add to parts (as boto3's s3transfer does), or None."""
        setting = getattr(self.client.meta.config, "request_checksum_calculation", None)
        return "CRC32" if setting in (None, "when_supported") else None

    def delete(self, key: str) -> None:
        # S3 answers 204 for a missing key, so missing is fine without a check.
        self._call("DeleteObject", key, Bucket=self.bucket, Key=self._full_key(key))

    def abort_multipart_uploads(self, key: str) -> int:
        """Abort every open multipart upload of ``key`` (a writer killed mid-way); returns how many."""
        full = self._full_key(key)
        resp = self._call("ListMultipartUploads", key, Bucket=self.bucket, Prefix=full)
        uploads = [u for u in resp.get("Uploads", ()) if u["Key"] == full]
        for u in uploads:
            self._call("AbortMultipartUpload", key, Bucket=self.bucket, Key=full, UploadId=u["UploadId"])
        return len(uploads)

    def open_multipart_uploads(self) -> list[str]:
        """Keys (relative to the prefix) with multipart uploads still open; for checks and GC."""
        base = f"{self.prefix}/" if self.prefix else ""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": base}
        keys: list[str] = []
        while True:
            resp = self._call("ListMultipartUploads", None, **kwargs)
            keys.extend(u["Key"][len(base):] for u in resp.get("Uploads", ()))
            if not resp.get("IsTruncated"):
                break
            kwargs["KeyMarker"] = resp.get("NextKeyMarker")
            kwargs["UploadIdMarker"] = resp.get("NextUploadIdMarker")
        return sorted(keys)


def _safe_text(exc: BaseException) -> str:
    """An exception's text with anything that looks like a secret cut out."""
    text = str(exc)
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID"):
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text[:200]
