"""One object written in parts by several tasks (FORMATS.md 4): create, parts, complete or abort.

Compaction writes an output that spans iterations as one multipart upload: the driver
creates it, each iteration's task uploads its piece as the next part, the driver
completes it after the last one (or aborts it on failure or interrupt).

- S3: CreateMultipartUpload / UploadPart / CompleteMultipartUpload / AbortMultipartUpload
  through the store's own client and error mapping (parts >= 5 MiB but the last: the plan's
  ``min_part`` sees to it).
- Local directory: the parts are written in place at their byte position into the file
  of the object's key, which is a prepared id's key that no manifest names until the
  compaction commits (as a crash leaves it, gc removes it with the prepared id). Each part
  is fsynced; complete fsyncs the file and its directory; abort removes the file.

The upload id travels in the task spec; each task opens the store itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import os
import uuid

from walctl.errors import IOFailure, NotFoundError

if TYPE_CHECKING:
    from walctl.store.base import Store


def _local(store: Store) -> bool:
    return hasattr(store, "root") and not hasattr(store, "bucket")


def create(store: Store, key: str) -> str:
    """Start the upload of ``key``; returns its upload id."""
    if not _local(store):
        create_args = {"Bucket": store.bucket, "Key": store._full_key(key)}
        checksum = store._checksum_algorithm()
        if checksum:
            create_args["ChecksumAlgorithm"] = checksum
        return store._call("CreateMultipartUpload", key, **create_args)["UploadId"]
    path = store._path(key)
    try:
        store._make_dirs(os.path.dirname(path))
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except OSError as exc:
        raise IOFailure(f"cannot create object file: {exc.strerror}", where=store._where(key)) from exc
    store.stats.add("put")
    return f"local-{uuid.uuid4().hex}"


def put_part(store: Store, key: str, upload_id: str, number: int, chunks: Iterable, position: int,
             size: int | None = None) -> dict:
    """Upload part ``number`` (1-based) made of ``chunks`` (bytes-likes), at object byte ``position``.

    ``chunks`` may be an iterator when ``size`` (their total) is given: a local store writes each
    chunk before it asks for the next, so the caller may reuse a chunk's buffer by then (as
    LocalStore.put_large does). Returns the part's record for ``complete`` (S3: its ETag and checksum).
    """
    if size is None:
        chunks = list(chunks)
        size = sum(len(c) for c in chunks)
    if not _local(store):
        checksum = store._checksum_algorithm()
        body = b"".join(chunks)
        if len(body) != size:
            raise IOFailure(f"part {number} holds {len(body)} bytes, {size} were announced", where=key)
        part = store._upload_part(key, store._full_key(key), upload_id, number, body, checksum)
        store.stats.add("bytes_written", size)
        return part
    from walctl.store.local import pwrite_all

    path = store._path(key)
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError as exc:
        raise NotFoundError("multipart object file is gone (aborted, or collected by gc)",
                            where=store._where(key)) from exc
    try:
        done = 0
        for chunk in chunks:  # each written before the next is asked for
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


def complete(store: Store, key: str, upload_id: str, parts: list[dict]) -> None:
    """Make the object whole from ``parts`` (in part order)."""
    parts = sorted(parts, key=lambda p: p["PartNumber"])
    if [p["PartNumber"] for p in parts] != list(range(1, len(parts) + 1)):
        raise IOFailure(f"multipart upload of {len(parts)} parts is missing some", where=key)
    if not _local(store):
        store._call("CompleteMultipartUpload", key, Bucket=store.bucket, Key=store._full_key(key),
                    UploadId=upload_id, MultipartUpload={"Parts": parts})
        return
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


def abort(store: Store, key: str, upload_id: str) -> None:
    """Drop the upload and its parts; never raises (S3's lifecycle rule is the fallback)."""
    try:
        if not _local(store):
            store._call("AbortMultipartUpload", key, Bucket=store.bucket, Key=store._full_key(key),
                        UploadId=upload_id)
        else:
            os.unlink(store._path(key))
    except Exception:  # noqa: BLE001 - best effort on the way out
        pass
