"""LocalSpool: an object of a local store written before its key is known (upload's one-pass objects)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import errno
import os
import uuid

from walctl.device.base import io_failure
from walctl.device.buffers import ALIGN
from walctl.errors import UsageError
from walctl.store.base import TEMP_PREFIX, check_key
from walctl.store.localio import WRITEBACK_BYTES, pwrite_all

if TYPE_CHECKING:
    from walctl.store.base import Store

class LocalSpool:
    """An object of a local store written before its key is known: a temp file (``.tmp-*``, which
    ``list`` never shows) in the store's root. ``write`` appends; ``publish`` appends the last bytes
    and makes the object appear under a key exactly as a put does (fsync, rename, fsync of the
    directories); ``discard`` removes it. A crash leaves at most the temp file, as a crash during a
    put does.

    ``direct`` (where the filesystem takes O_DIRECT): appends of whole ALIGN units from aligned
    memory (a list of them: one system call) go to the disk without the page cache: no copy into
    it, no dirty pages competing with the reads of the WAL for the disk, nothing to drop after. Any
    other append turns direct off for the rest of the spool (buffered from there, as a put: the
    writeback started every WRITEBACK_BYTES). ``publish``'s last bytes are written buffered.

    ``write`` may run on another thread than the one that opened it; ``publish`` and ``discard``
    only once no ``write`` runs.
    """

    def __init__(self, store: Store, *, direct: bool = True):
        self._store = store
        self.path = os.path.join(store.root, f"{TEMP_PREFIX}{uuid.uuid4().hex}")
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            raise io_failure(f"cannot create a temp object: {exc.strerror or exc}", where=self.path, exc=exc) from exc
        self.size = 0  # bytes written so far
        self.key: str | None = None  # where it was published
        self._kicked = 0
        self.direct = direct and self._set_direct(True)

    def _set_direct(self, on: bool) -> bool:
        """Turn O_DIRECT on or off for the spool's fd; False when the filesystem refuses it.
        (Set after the exclusive create: an O_DIRECT refused at open would leave the file made.)"""
        import fcntl

        try:
            flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
            fcntl.fcntl(self._fd, fcntl.F_SETFL, flags | os.O_DIRECT if on else flags & ~os.O_DIRECT)
        except OSError:
            return False
        return on

    def write(self, data) -> None:
        """Append ``data`` (bytes-like, or a list of them written with one system call)."""
        views = [memoryview(d).cast("B") for d in (data if isinstance(data, list) else [data])]
        try:
            if self.direct:
                if self.size % ALIGN or any(v.nbytes % ALIGN for v in views):
                    self.direct = self._set_direct(False)
                else:
                    try:
                        self.size += pwrite_all(self._fd, views, self.size)
                        return
                    except OSError as exc:
                        if exc.errno != errno.EINVAL:  # EINVAL: memory O_DIRECT does not take (nothing written)
                            raise
                        self.direct = self._set_direct(False)
            self.size += pwrite_all(self._fd, views, self.size)
            if self.size - self._kicked >= WRITEBACK_BYTES:
                os.posix_fadvise(self._fd, self._kicked, self.size - self._kicked, os.POSIX_FADV_DONTNEED)
                self._kicked = self.size
        except OSError as exc:
            raise io_failure(f"write failed: {exc.strerror or exc}", where=self.path, exc=exc) from exc

    def publish(self, key: str, tail: bytes = b"") -> None:
        """Append ``tail`` and store the whole under ``key`` (replacing what is there, as put)."""
        store = self._store
        check_key(key)
        store.stats.add("put")
        if self._fd < 0:
            raise UsageError("the spool is already published or discarded", where=self.path)
        try:
            path = store._make_key_dirs(key)
            if self.direct:
                self.direct = self._set_direct(False)
            pwrite_all(self._fd, [memoryview(tail).cast("B")], self.size)
        except BaseException as exc:
            fd, self._fd = self._fd, -1
            os.close(fd)
            store._remove_quietly(self.path)
            if isinstance(exc, OSError):
                raise io_failure(f"write failed: {exc.strerror or exc}", where=store._where(key), exc=exc) from exc
            raise
        fd, self._fd = self._fd, -1
        store._publish(fd, self.path, key, path, if_absent=False)
        self.key = key
        store.stats.add("bytes_written", self.size + len(tail))

    def discard(self) -> None:
        """Remove the temp file (nothing was published); a no-op once published or discarded."""
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        os.close(fd)
        self._store._remove_quietly(self.path)
