"""Objects written in parts, in both stores: S3's multipart uploads and a local store's in-place parts.

Three users: ``put_large`` above the multipart threshold (one process cuts a stream into
parts), ``compose`` (S3 UploadPartCopy where a part can be copied server-side), and an
object whose parts several processes write (compaction's Spark tasks, FORMATS.md 4): the
driver creates it, each task uploads its piece as the next part, the driver completes it
after the last one or aborts it. For that last use each store has ``create_multipart``,
``put_part``, ``complete_multipart`` and ``abort_multipart`` (walctl.store.base.Store); the
upload id travels to the tasks, which open the store themselves.

- S3: CreateMultipartUpload / UploadPart / UploadPartCopy / CompleteMultipartUpload /
  AbortMultipartUpload through the store's own client, retries and error mapping (parts >= 5 MiB
  but the last).
- Local directory: the parts are written in place at their byte position into the file of
  the object's key, which is a prepared id's key that no manifest names until the compaction
  commits (as a crash leaves it, gc removes it with the prepared id). Each part is fsynced;
  complete fsyncs the file's directory; abort removes the file.

Only walctl.store calls these functions (they use the stores' private helpers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import os
import uuid

from walctl.errors import CorruptionError, IOFailure, NotFoundError, UsageError, WalctlError
from walctl.failpoints import failpoint
from walctl.store.base import MAX_PART_BYTES, MAX_PARTS, MIN_PART_BYTES, CopySource, check_range
from walctl.store.localio import pwrite_all

if TYPE_CHECKING:
    from walctl.store.base import Store


def ordered_parts(key: str, parts: list[dict]) -> list[dict]:
    """``parts`` in part order; IOFailure unless they are parts 1..n."""
    parts = sorted(parts, key=lambda p: p["PartNumber"])
    if [p["PartNumber"] for p in parts] != list(range(1, len(parts) + 1)):
        raise IOFailure(f"multipart upload of {len(parts)} parts is missing some", where=key)
    return parts


def _joined(chunks: Iterable, size: int | None) -> tuple[list, int]:
    if size is None:
        chunks = list(chunks)
        size = sum(len(c) for c in chunks)
    return chunks, size


# --- S3 ---------------------------------------------------------------------------------------

def s3_create(store: Store, key: str) -> str:
    """CreateMultipartUpload of ``key`` (with the checksum the parts will carry); its upload id."""
    create: dict[str, Any] = {"Bucket": store.bucket, "Key": store._full_key(key)}
    checksum = store._checksum_algorithm()
    if checksum:
        create["ChecksumAlgorithm"] = checksum
    return store._call("CreateMultipartUpload", key, **create)["UploadId"]


def s3_upload_part(store: Store, key: str, upload_id: str, number: int, body: bytes,
                   checksum: str | None) -> dict[str, Any]:
    """UploadPart; returns the part's entry for CompleteMultipartUpload."""
    kwargs: dict[str, Any] = {"Bucket": store.bucket, "Key": store._full_key(key), "UploadId": upload_id,
                              "PartNumber": number, "Body": body}
    if checksum:
        kwargs["ChecksumAlgorithm"] = checksum
    resp = store._call("UploadPart", key, **kwargs)
    part = {"PartNumber": number, "ETag": resp["ETag"]}
    member = f"Checksum{checksum}" if checksum else None
    if member and resp.get(member):
        part[member] = resp[member]
    return part


def s3_put_part(store: Store, key: str, upload_id: str, number: int, chunks: Iterable,
                size: int | None = None) -> dict:
    """Part ``number`` of an upload another process may have created: ``chunks`` joined."""
    chunks, size = _joined(chunks, size)
    body = b"".join(chunks)
    if len(body) != size:
        raise IOFailure(f"part {number} holds {len(body)} bytes, {size} were announced", where=key)
    part = s3_upload_part(store, key, upload_id, number, body, store._checksum_algorithm())
    store.stats.add("bytes_written", size)
    return part


def s3_complete(store: Store, key: str, upload_id: str, parts: list[dict], *, total: int | None = None) -> None:
    """CompleteMultipartUpload. With ``total``: a retried complete whose first attempt landed
    (it finds no upload) is success when the object has that size."""
    try:
        store._call("CompleteMultipartUpload", key, Bucket=store.bucket, Key=store._full_key(key),
                    UploadId=upload_id, MultipartUpload={"Parts": parts})
    except WalctlError as err:
        if total is None or not (getattr(err, "attempts", 1) > 1 and _has_size(store, key, total)):
            raise


def s3_abort(store: Store, key: str, upload_id: str, cause: BaseException | None = None) -> None:
    """Abort the upload so no parts linger (and are billed). ``cause``: the failure that ends it;
    if the abort fails too, a note goes on its hint (an interrupt gets one attempt: the operator
    waits). Without a cause a failed abort raises."""
    retry = store._retry("AbortMultipartUpload", key, quick=isinstance(cause, KeyboardInterrupt)) \
        if cause is not None else None
    try:
        store._call("AbortMultipartUpload", key, _retry=retry, Bucket=store.bucket, Key=store._full_key(key),
                    UploadId=upload_id)
    except Exception:
        if cause is None:
            raise
        if isinstance(cause, WalctlError):
            note = (f"multipart upload {upload_id} could not be aborted; an "
                    "AbortIncompleteMultipartUpload lifecycle rule removes it")
            cause.hint = f"{cause.hint}; {note}" if cause.hint else note


def s3_put_stream(store: Store, key: str, stream: Iterator[bytes], part_size: int) -> None:
    """put_large above the threshold: ``stream`` cut into parts of ``part_size``; one part goes up
    (a thread) while the next is built from the stream, so the network and the building (upload's
    WAL reads) overlap; at most two parts are held. Aborted on any failure."""
    from concurrent.futures import ThreadPoolExecutor  # here: readers of a local store never pay for logging

    checksum = store._checksum_algorithm()
    upload_id = s3_create(store, key)
    parts: list[dict[str, Any]] = []
    total = 0
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="walctl-s3-part") as sender:
            sending = None
            for number, body in enumerate(_split_parts(stream, part_size), start=1):
                if number > MAX_PARTS:
                    raise UsageError(f"object needs more than {MAX_PARTS} parts of {part_size} bytes: "
                                     "use a larger part size", where=store._where(key))
                if sending is not None:
                    parts.append(sending.result())
                sending = sender.submit(s3_upload_part, store, key, upload_id, number, body, checksum)
                total += len(body)
                del body
            if sending is not None:
                parts.append(sending.result())
        s3_complete(store, key, upload_id, parts, total=total)
    except BaseException as exc:
        s3_abort(store, key, upload_id, exc)
        raise
    store.stats.add("bytes_written", total)


def s3_compose(store: Store, key: str, pieces: Sequence[bytes | CopySource]) -> None:
    """One multipart upload: UploadPartCopy (a ranged server-side copy) for every part that can be
    one, UploadPart only for what S3's 5 MiB part minimum forces through us (``plan_compose_parts``).
    An object with nothing to copy server-side is one PutObject of the bytes."""
    store._full_key(key)
    for piece in pieces:
        if isinstance(piece, CopySource):
            store._full_key(piece.key)
            check_range(piece.start, piece.end)
    parts = plan_compose_parts(pieces)
    if not any(isinstance(p, CopySource) for p in parts):
        store.put(key, b"".join(_fetch(store, p) for part in parts for p in part))
        return
    if len(parts) > MAX_PARTS:
        raise UsageError(f"composed object needs {len(parts)} parts, S3 allows {MAX_PARTS}",
                         where=store._where(key))
    upload_id = s3_create(store, key)
    try:
        done, written, copied = _compose_parts(store, key, upload_id, parts)
        s3_complete(store, key, upload_id, done, total=written + copied)
    except BaseException as exc:
        s3_abort(store, key, upload_id, exc)
        raise
    store.stats.add("bytes_written", written)
    store.stats.add("bytes_copied", copied)


def _compose_parts(store: Store, key: str, upload_id: str, parts: list) -> tuple[list[dict], int, int]:
    """Upload ``parts`` (copied or put); their entries, the bytes put and the bytes copied."""
    checksum = store._checksum_algorithm()
    member = f"Checksum{checksum}" if checksum else None
    done: list[dict[str, Any]] = []
    written = copied = 0
    for number, part in enumerate(parts, start=1):
        if isinstance(part, CopySource):
            resp = store._call("UploadPartCopy", key, Bucket=store.bucket, Key=store._full_key(key),
                               UploadId=upload_id, PartNumber=number,
                               CopySource={"Bucket": store.bucket, "Key": store._full_key(part.key)},
                               CopySourceRange=f"bytes={part.start}-{part.end - 1}")
            result = resp.get("CopyPartResult", {})
            entry = {"PartNumber": number, "ETag": result["ETag"]}
            if member and result.get(member):
                entry[member] = result[member]
            copied += part.size
        else:
            body = b"".join(_fetch(store, p) for p in part)
            entry = s3_upload_part(store, key, upload_id, number, body, checksum)
            written += len(body)
        done.append(entry)
        failpoint("compose-after-part")
    return done, written, copied


def _fetch(store: Store, piece: bytes | CopySource) -> bytes:
    """A piece's bytes: itself, or a ranged GET of a source too small to be a copied part."""
    if not isinstance(piece, CopySource):
        return bytes(piece)
    data = store.read_range(piece.key, piece.start, piece.end)
    if len(data) != piece.size:
        raise CorruptionError(f"source object ends before its range [{piece.start}, {piece.end})",
                              where=store._where(piece.key), expected=piece.size, found=len(data))
    return data


def _has_size(store: Store, key: str, size: int) -> bool:
    try:
        return store.size(key) == size
    except WalctlError:
        return False


def plan_compose_parts(pieces: Sequence[bytes | CopySource], *, min_part: int = MIN_PART_BYTES,
                       max_part: int = MAX_PART_BYTES) -> list[CopySource | list[bytes | CopySource]]:
    """Cut ``pieces`` into multipart parts: a ``CopySource`` part is one UploadPartCopy (at least
    ``min_part`` bytes, at most ``max_part``); a list is one UploadPart of those pieces' bytes.

    Every part but the last is at least ``min_part`` bytes, as S3 demands. Bytes go through the
    caller only where a part would otherwise be too small: a run of pieces smaller than
    ``min_part`` is topped up to the minimum with bytes taken from the neighbouring copied
    ranges (the head of the next, then the tail of the previous, each only as far as it stays
    a copyable part); when they cannot spare enough, the next range is taken whole.
    """
    cut = _PartCutter(min_part, max_part)
    for piece in pieces:
        if not isinstance(piece, CopySource):
            cut.add_bytes(piece)
        else:
            cut.add_copy(piece)
        if cut.buf_len >= min_part:
            cut.flush()
    cut.flush()
    return cut.parts


class _PartCutter:
    """plan_compose_parts' state: the parts so far and the run of small pieces being gathered."""

    def __init__(self, min_part: int, max_part: int):
        self.min_part, self.max_part = min_part, max_part
        self.parts: list[CopySource | list[bytes | CopySource]] = []
        self.buf: list[bytes | CopySource] = []
        self.buf_len = 0

    def flush(self) -> None:
        if self.buf:
            self.parts.append(self.buf)
        self.buf, self.buf_len = [], 0

    def add_bytes(self, piece: bytes) -> None:
        if piece:
            self.buf.append(piece)
            self.buf_len += len(piece)

    def add_copies(self, key: str, start: int, end: int) -> None:
        rest = end - start
        count = -(-rest // self.max_part)
        step = -(-rest // count)  # equal cuts, each >= min_part as rest >= min_part
        for a in range(start, end, step):
            self.parts.append(CopySource(key, a, min(a + step, end)))

    def add_copy(self, piece: CopySource) -> None:
        start = piece.start
        # Top the run of small pieces up only when this range could be copied: a small
        # range joins the run as it is (the run may end as the last part, of any size).
        if 0 < self.buf_len < self.min_part and piece.size >= self.min_part:
            start = self._top_up(piece)
        if start < piece.end:
            rest = piece.end - start
            if rest >= self.min_part:
                self.flush()
                self.add_copies(piece.key, start, piece.end)
            else:
                self.buf.append(CopySource(piece.key, start, piece.end))
                self.buf_len += rest

    def _top_up(self, piece: CopySource) -> int:
        """Fill the run to min_part from the head of ``piece`` and the tail of the copied part
        before it; else the whole piece joins the run. Where ``piece``'s copy now starts."""
        need = self.min_part - self.buf_len
        from_next = min(need, max(0, piece.size - self.min_part))
        prev = self.parts[-1] if self.parts and isinstance(self.parts[-1], CopySource) else None
        from_prev = min(need - from_next, max(0, prev.size - self.min_part)) if prev is not None else 0
        if from_next + from_prev != need:
            self.buf.append(piece)
            self.buf_len += piece.size
            return piece.end
        if from_prev:
            self.parts[-1] = CopySource(prev.key, prev.start, prev.end - from_prev)
            self.buf.insert(0, CopySource(prev.key, prev.end - from_prev, prev.end))
        self.buf_len += need
        if from_next:
            self.buf.append(CopySource(piece.key, piece.start, piece.start + from_next))
        return piece.start + from_next


def head_then(head: bytearray, rest: Iterator[bytes]) -> Iterator[bytes]:
    """The buffered head (not copied), then the rest of the stream; the head is let go once cut
    into parts, so a streamed object holds about one part, not the multipart threshold."""
    chunk = head
    del head
    yield chunk
    del chunk
    yield from rest


def _split_parts(stream: Iterable[bytes], part_size: int) -> Iterator[bytes]:
    """Re-cut a stream of chunks into parts of exactly ``part_size`` bytes (the last may be short).

    A chunk is sliced in place where it can be, so a large ``bytes`` is not copied twice.
    """
    pending = bytearray()
    for chunk in stream:
        view = memoryview(chunk)
        if pending:
            need = part_size - len(pending)
            pending += view[:need]
            view = view[need:]
            if len(pending) < part_size:
                continue
            yield bytes(pending)
            pending = bytearray()
        while len(view) >= part_size:
            yield bytes(view[:part_size])
            view = view[part_size:]
        pending += view
    if pending:
        yield bytes(pending)


# --- local directory --------------------------------------------------------------------------

def local_create(store: Store, key: str) -> str:
    """The object's file, created empty (its directories made); a fresh upload id."""
    path = store._path(key)
    try:
        store._make_dirs(os.path.dirname(path))
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except OSError as exc:
        raise IOFailure(f"cannot create object file: {exc.strerror}", where=store._where(key)) from exc
    store.stats.add("put")
    return f"local-{uuid.uuid4().hex}"


def local_put_part(store: Store, key: str, number: int, chunks: Iterable, position: int,
                   size: int | None = None) -> dict:
    """Part ``number`` written at ``position`` of the object's file, each chunk before the next is
    asked for (the caller may reuse a chunk's buffer by then), fsynced, dropped from the page cache."""
    chunks, size = _joined(chunks, size)
    path = store._path(key)
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError as exc:
        raise NotFoundError("multipart object file is gone (aborted, or collected by gc)",
                            where=store._where(key)) from exc
    try:
        done = 0
        for chunk in chunks:
            done += pwrite_all(fd, [memoryview(chunk).cast("B")], position + done)
        if done != size:
            raise IOFailure(f"part {number} holds {done} bytes, {size} were announced", where=store._where(key))
        os.fsync(fd)
        os.posix_fadvise(fd, position, size, os.POSIX_FADV_DONTNEED)
    except OSError as exc:
        raise IOFailure(f"write of part {number} failed: {exc.strerror or exc}", where=store._where(key)) from exc
    finally:
        os.close(fd)
    store.stats.add("multipart_parts")
    store.stats.add("bytes_written", size)
    return {"PartNumber": number, "size": size}


def local_complete(store: Store, key: str, parts: list[dict]) -> None:
    """The file holds every part: its size checked, its directory fsynced."""
    path = store._path(key)
    try:
        size = os.stat(path).st_size
        if size != sum(p["size"] for p in parts):
            raise IOFailure(f"multipart object holds {size} bytes, its parts {sum(p['size'] for p in parts)}",
                            where=store._where(key))
        fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise IOFailure(f"completing the object failed: {exc.strerror}", where=store._where(key)) from exc
    store.stats.add("put")


def local_abort(store: Store, key: str) -> None:
    os.unlink(store._path(key))
