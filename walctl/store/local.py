"""A store in a local directory: the embedded default, so walctl runs with no cloud account.

Every object appears under its key whole or not at all: put writes a temp file
(``.tmp-*``) beside the target, fsyncs it, then renames it into place (or, for a
create-only put, hard-links it, which fails with EEXIST if the key exists),
removes the temp name and fsyncs the directory. A crash leaves at most a temp
file, which ``list`` never shows.

Written objects are dropped from the page cache once fsynced; reads use O_DIRECT
where the filesystem allows it (aligned reads into an aligned
buffer, then the asked-for bytes are cut out): inspecting or compacting objects
on a live machine leaves its page cache alone. tmpfs and the like refuse O_DIRECT;
there reads are ordinary.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import uuid
from typing import Iterable, Sequence

from walctl.device.base import io_failure
from walctl.device.buffers import ALIGN, aligned_buffer, align_down, align_up
from walctl.errors import CorruptionError, IOFailure, NotFoundError, UsageError
from walctl.store import multipart
from walctl.store.base import (
    DEFAULT_PART_BYTES,
    CopySource,
    TEMP_PREFIX,
    ObjectInfo,
    PreconditionFailed,
    RequestStats,
    StoreCapabilities,
    check_key,
    check_part_size,
    check_prefix,
    check_range,
)
from walctl.store.localio import WRITEBACK_BYTES, fsync_dir, write_all
from walctl.store.localspool import LocalSpool

# errnos that mean "no object under this key" when reading.
_MISSING = (errno.ENOENT, errno.ENOTDIR, errno.EISDIR)
DIRECT_READ_CHUNK = 8 << 20  # O_DIRECT reads go through an aligned buffer of at most this size
# A read up to this size goes through one aligned buffer of its own size: one copy out instead of two.
DIRECT_READ_WHOLE = 32 << 20

# Each thread's aligned buffer for O_DIRECT reads (at most DIRECT_READ_WHOLE bytes), kept between
# reads: a new anonymous mapping per read costs a page fault and the kernel's zeroing per 4 KiB,
# more than the read's copy out (a third of `walctl read`'s CPU time on a local store).
_DIRECT_BUFFERS = threading.local()


class _ViewBuffers:
    """Aligned buffers lent out as views (read_range_view, read_tail_view): a buffer is read into again
    only once no view of it is left (mmap.resize refuses while one is: BufferError), so a view's bytes
    never change. Keeps at most KEEP buffers; beyond, a fresh one per read, freed with its last view."""

    KEEP = 8

    def __init__(self):
        self._bufs: list = []
        self._lock = threading.Lock()

    @staticmethod
    def _unviewed(buf) -> bool:
        try:
            buf.resize(len(buf))  # same size: a no-op, refused while a view of buf exists
        except BufferError:
            return False
        return True

    def view(self, size: int) -> memoryview:
        """A writable view of ``size`` bytes of an aligned buffer no other view holds (taken under the
        lock: two threads never get the same buffer)."""
        with self._lock:
            for buf in sorted(self._bufs, key=len):  # the smallest that fits
                if len(buf) >= size and self._unviewed(buf):
                    return memoryview(buf)[:size]
            buf = aligned_buffer(size)
            if len(self._bufs) < self.KEEP:
                self._bufs.append(buf)
            return memoryview(buf)


_VIEW_BUFFERS = _ViewBuffers()
VIEW_MIN = 1 << 20  # smaller reads are copied out (cheap) rather than hold a lent buffer


def _direct_buffer(size: int):
    """This thread's aligned buffer of at least ``size`` bytes (a multiple of ALIGN, at most
    DIRECT_READ_WHOLE), grown when too small; used within one read only (its bytes are copied out)."""
    buf = getattr(_DIRECT_BUFFERS, "buf", None)
    if buf is None or len(buf) < size:
        if buf is not None:
            buf.close()
        _DIRECT_BUFFERS.buf = None
        buf = _DIRECT_BUFFERS.buf = aligned_buffer(size)
    return buf


def _written_as_given(data: bytes | Iterable[bytes]) -> Iterable[bytes]:
    """put_large's chunks as they come (checked, not copied): _commit writes each one before it
    asks for the next, so a chunk that is a view, or a buffer the caller fills again, is safe."""
    for chunk in [data] if isinstance(data, (bytes, bytearray, memoryview)) else data:
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise UsageError(f"put_large: chunks must be bytes, got {type(chunk).__name__}")
        yield chunk if isinstance(chunk, bytes) else memoryview(chunk).cast("B")


class LocalStore:
    """A store rooted at a directory; keys map to files below it."""

    def __init__(self, root: str | os.PathLike, *, create: bool = True, missing_ok: bool = False):
        """Open (and with ``create``, make) the store at ``root``.

        ``missing_ok`` (with ``create`` False): a missing ``root`` is an empty store that
        lists nothing and is not created (a dry run's view of a store not made yet).

        Raises:
            UsageError: ``root`` exists and is not a directory.
            NotFoundError: ``root`` is missing and ``create`` is False.
            IOFailure: the directory could not be created.
        """
        self.root = os.path.abspath(os.fspath(root))
        self.url = self.root
        self.stats = RequestStats()
        self.capabilities = StoreCapabilities(server_side_copy=True, lends_views=True, reads_into=True,
                                              executor_url=self.root)
        if os.path.isdir(self.root):
            return
        if os.path.exists(self.root):
            raise UsageError("store path is not a directory", where=self.root,
                             hint="--store names a store directory, file:///absolute/dir or s3://bucket/prefix")
        if not create and not missing_ok:
            raise NotFoundError("no such store directory", where=self.root)
        blocker = self._file_in_the_way(self.root)
        if blocker is not None:  # what creating it would fail on: refused the same way by a dry run
            raise IOFailure(f"cannot create store directory: {blocker} is not a directory", where=self.root,
                            hint="check the --store path")
        if not create:
            return  # missing_ok: an empty store, not created
        try:
            self._make_dirs(self.root)
        except OSError as exc:
            raise IOFailure(f"cannot create store directory: {exc.strerror}",
                            where=self.root, hint="check the --store path and its permissions") from exc

    def __repr__(self) -> str:
        return f"LocalStore({self.root!r})"

    # -- helpers -------------------------------------------------------------

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *check_key(key).split("/"))

    def _where(self, key: str) -> str:
        return os.path.join(self.root, key)

    @staticmethod
    def _file_in_the_way(path: str) -> str | None:
        """The nearest existing ancestor of the missing ``path`` when it is not a directory."""
        cur = os.path.dirname(path)
        while not os.path.lexists(cur) and os.path.dirname(cur) != cur:
            cur = os.path.dirname(cur)
        return None if os.path.isdir(cur) else cur

    @staticmethod
    def _make_dirs(path: str) -> None:
        """Create ``path`` and missing parents, fsyncing each new entry's parent so it survives a crash."""
        missing = []
        cur = path
        while not os.path.isdir(cur):
            missing.append(cur)
            parent = os.path.dirname(cur)
            if parent == cur:
                break
            cur = parent
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                if not os.path.isdir(d):
                    raise
            fsync_dir(os.path.dirname(d))

    def _read_error(self, exc: OSError, key: str) -> Exception:
        if exc.errno in _MISSING:
            return NotFoundError("no such object", where=self._where(key),
                                 hint="check the object id or key; 'walctl ls --store URL' lists the live objects")
        return io_failure(f"read failed: {exc.strerror}", where=self._where(key), exc=exc)

    def _open_read(self, key: str) -> tuple[int, bool]:
        """(fd, direct): O_DIRECT where the filesystem takes it, else an ordinary read-only fd.
        O_NONBLOCK (no effect on a regular file) keeps a FIFO from blocking the open; anything but a
        regular file is not an object (NotFoundError)."""
        path = self._path(key)
        try:
            try:
                fd, direct = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_NONBLOCK), True
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                fd, direct = os.open(path, os.O_RDONLY | os.O_NONBLOCK), False
        except OSError as exc:
            raise self._read_error(exc, key) from exc
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotFoundError("no such object (not a regular file)", where=self._where(key),
                                hint="an object is a regular file in the store; check the key or the path")
        return fd, direct

    def _pread(self, opened: tuple[int, bool], key: str, start: int, length: int, view: bool = False) -> bytes:
        fd, direct = opened
        if direct:
            if view and VIEW_MIN <= length and align_up(start + length) - align_down(start) <= DIRECT_READ_WHOLE:
                got = self._pread_direct_once(fd, key, start, start + length, view=True)
                if got is not None:
                    return got
            return self._pread_direct(fd, key, start, length)
        chunks = []
        pos, left = start, length
        try:
            while left > 0:
                got = os.pread(fd, left, pos)
                if not got:
                    break  # the end of the object
                chunks.append(got)
                pos += len(got)
                left -= len(got)
        except OSError as exc:
            raise self._read_error(exc, key) from exc
        data = b"".join(chunks)
        self.stats.add("bytes_read", len(data))
        return data

    def _pread_direct(self, fd: int, key: str, start: int, length: int) -> bytes:
        """Read [start, start + length) (less at the end of the file) with aligned O_DIRECT reads."""
        out = bytearray()
        if length <= 0:
            self.stats.add("bytes_read", 0)
            return b""
        end = start + length
        pos = align_down(start)
        if align_up(end) - pos <= DIRECT_READ_WHOLE:
            single = self._pread_direct_once(fd, key, start, end)
            if single is not None:
                return single
        chunk = min(DIRECT_READ_CHUNK, align_up(end) - pos)
        buf = _direct_buffer(chunk)
        while pos < end:
            with memoryview(buf) as whole, whole[:chunk] as view:
                try:
                    got = os.preadv(fd, [view], pos)
                except OSError as exc:
                    raise self._read_error(exc, key) from exc
                if got <= 0:
                    break  # the end of the object
                lo = max(start, pos) - pos
                hi = min(end, pos + got) - pos
                if hi > lo:
                    out += view[lo:hi]
            pos += got
            if got % ALIGN:
                break  # a short read ends only at the end of the file
        self.stats.add("bytes_read", len(out))
        return bytes(out)

    def _pread_direct_once(self, fd: int, key: str, start: int, end: int, view: bool = False) -> bytes | None:
        """[start, end) with one aligned O_DIRECT read and one copy out (``view``: no copy, a read-only
        view of a buffer lent by _VIEW_BUFFERS); None when the read came back short before ``end`` for
        another reason than the end of the file (the chunked loop retries)."""
        pos = align_down(start)
        span = align_up(end) - pos
        if view:
            whole = _VIEW_BUFFERS.view(span)
            try:
                got = os.preadv(fd, [whole[:span]], pos)
            except OSError as exc:
                raise self._read_error(exc, key) from exc
            if got < min(end, pos + span) - pos and got % ALIGN == 0:
                return None
            data = whole[start - pos:max(start - pos, min(end - pos, got))].toreadonly()
            self.stats.add("bytes_read", len(data))
            return data
        with memoryview(_direct_buffer(span)) as whole, whole[:span] as part:
            try:
                got = os.preadv(fd, [part], pos)
            except OSError as exc:
                raise self._read_error(exc, key) from exc
            if got < min(end, pos + len(part)) - pos and got % ALIGN == 0:
                return None
            data = bytes(part[start - pos:max(start - pos, min(end - pos, got))])
        self.stats.add("bytes_read", len(data))
        return data

    # -- reads ---------------------------------------------------------------

    def size(self, key: str) -> int:
        path = self._path(key)
        self.stats.add("head")
        try:
            st = os.stat(path)
        except OSError as exc:
            raise self._read_error(exc, key) from exc
        if not os.path.isfile(path):
            raise NotFoundError("no such object (a directory)", where=self._where(key))
        return st.st_size

    def read_range(self, key: str, start: int, end: int) -> bytes:
        return self._read_range(key, start, end, view=False)

    def read_tail(self, key: str, length: int) -> tuple[bytes, int]:
        return self._read_tail(key, length, view=False)

    def read_range_view(self, key: str, start: int, end: int) -> bytes | memoryview:
        """read_range without the copy out of the O_DIRECT buffer: a read-only view whose bytes never
        change (its buffer is not read into again while the view, or a view of it, lives)."""
        return self._read_range(key, start, end, view=True)

    def read_tail_view(self, key: str, length: int) -> tuple[bytes | memoryview, int]:
        """read_tail without the copy out, as read_range_view."""
        return self._read_tail(key, length, view=True)

    def read_range_into(self, key: str, start: int, end: int, buf) -> memoryview:
        """read_range into the caller's page-aligned buffer ``buf`` (at least ``into_size(start, end)``
        bytes, e.g. device.buffers.aligned_buffer): one O_DIRECT read of the aligned span, no copy;
        returns a read-only view of ``buf`` holding [start, end) (shorter at the end of the object).
        One GET, counted as read_range's. The caller owns ``buf``: the bytes change if it reads into
        it again."""
        check_range(start, end)
        pos = align_down(start)
        span = align_up(end) - pos
        if len(buf) < span:
            raise ValueError(f"buffer of {len(buf)} bytes for an aligned span of {span}")
        self.stats.add("get")
        self.stats.add("ranged_gets")
        fd, direct = self._open_read(key)
        try:
            whole = memoryview(buf)[:span]
            got = done = 0
            while done < end - pos:  # a short read before the end of the file is retried from there
                try:
                    got = os.preadv(fd, [whole[done:]], pos + done)
                except OSError as exc:
                    raise self._read_error(exc, key) from exc
                done += got
                if got <= 0 or (direct and got % ALIGN):
                    break  # the end of the object
        finally:
            os.close(fd)
        data = whole[start - pos:max(start - pos, min(end - pos, done))].toreadonly()
        self.stats.add("bytes_read", len(data))
        return data

    @staticmethod
    def into_size(start: int, end: int) -> int:
        """Bytes of the buffer read_range_into(start, end) needs: the aligned span."""
        return align_up(end) - align_down(start)

    def _read_range(self, key: str, start: int, end: int, *, view: bool):
        check_range(start, end)
        self.stats.add("get")
        self.stats.add("ranged_gets")
        opened = self._open_read(key)
        try:
            return self._pread(opened, key, start, end - start, view=view)
        finally:
            os.close(opened[0])

    def _read_tail(self, key: str, length: int, *, view: bool):
        if length < 0:
            raise UsageError(f"bad tail length {length}")
        self.stats.add("get")
        self.stats.add("ranged_gets")
        opened = self._open_read(key)
        try:
            total = os.fstat(opened[0]).st_size
            start = max(0, total - length)
            return self._pread(opened, key, start, total - start, view=view), total
        finally:
            os.close(opened[0])

    def read_all(self, key: str) -> bytes:
        self.stats.add("get")
        opened = self._open_read(key)
        try:
            return self._pread(opened, key, 0, os.fstat(opened[0]).st_size)
        finally:
            os.close(opened[0])

    def stale_temp_files(self, older_than_s: float, now: float) -> list[str]:
        """The temp files (``.tmp-*``: spools and puts) under the root not modified for
        ``older_than_s`` seconds before ``now``, as paths relative to the root: what a writer
        killed mid-way (SIGKILL, power loss) left; a live one keeps writing its own."""
        self.stats.add("list")
        out: list[str] = []
        for path, dirs, files in os.walk(self.root):
            for name in files:
                if not name.startswith(TEMP_PREFIX):
                    continue
                full = os.path.join(path, name)
                try:
                    if os.lstat(full).st_mtime <= now - older_than_s:
                        out.append(os.path.relpath(full, self.root))
                except FileNotFoundError:
                    continue  # published or discarded meanwhile
        return sorted(out)

    def remove_temp_file(self, rel: str) -> None:
        """Remove one file ``stale_temp_files`` named (gone already: nothing to do)."""
        if not os.path.basename(rel).startswith(TEMP_PREFIX):
            raise UsageError(f"not a temp file: {rel}")
        self.stats.add("delete")
        try:
            os.unlink(os.path.join(self.root, rel))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise io_failure(f"cannot remove temp file: {exc.strerror}", where=os.path.join(self.root, rel),
                             exc=exc) from exc

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        check_prefix(prefix)
        self.stats.add("list")
        # Walk only below the deepest directory the prefix fully names.
        base_rel = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        base = os.path.join(self.root, *base_rel.split("/")) if base_rel else self.root
        out: list[ObjectInfo] = []
        stack = [(base, base_rel)]
        while stack:
            path, rel = stack.pop()
            try:
                entries = list(os.scandir(path))
            except FileNotFoundError:
                continue  # nothing under this prefix (or removed while walking)
            except NotADirectoryError:
                continue
            except OSError as exc:
                raise IOFailure(f"cannot list directory: {exc.strerror}", where=path) from exc
            for entry in entries:
                if entry.name.startswith(TEMP_PREFIX):
                    continue  # a put in progress, or one a crash interrupted
                key = f"{rel}/{entry.name}" if rel else entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if key.startswith(prefix) or prefix.startswith(key + "/"):
                            stack.append((entry.path, key))
                    elif entry.is_file(follow_symlinks=False) and key.startswith(prefix):
                        out.append(ObjectInfo(key, entry.stat(follow_symlinks=False).st_size))
                except FileNotFoundError:
                    continue  # deleted while listing
        # Code-point order of str equals S3's UTF-8 byte order.
        out.sort(key=lambda info: info.key)
        return out

    # -- writes --------------------------------------------------------------

    def _copy_into(self, fd: int, src: CopySource) -> int:
        """Append ``src``'s bytes to ``fd`` in the kernel (copy_file_range: no copy through this
        process, a reflink on filesystems that share extents); returns the bytes copied."""
        check_range(src.start, src.end)
        try:
            src_fd = os.open(self._path(src.key), os.O_RDONLY)
        except OSError as exc:
            raise self._read_error(exc, src.key) from exc
        try:
            pos, left = src.start, src.size
            while left > 0:
                try:
                    done = os.copy_file_range(src_fd, fd, left, pos)
                except OSError as exc:
                    if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                    # No in-kernel copy here (another filesystem, old kernel): read and write.
                    data = os.pread(src_fd, min(left, DIRECT_READ_CHUNK), pos)
                    self.stats.add("bytes_read", len(data))
                    write_all(fd, data)
                    done = len(data)
                if done == 0:
                    raise CorruptionError(f"source object ends before its range [{src.start}, {src.end}) "
                                          f"(at {pos})", where=self._where(src.key))
                pos += done
                left -= done
        finally:
            os.close(src_fd)
        return src.size

    def _commit(self, key: str, chunks: Iterable[bytes | CopySource], *, if_absent: bool) -> None:
        """Write ``chunks`` to a temp file beside ``key`` and publish it atomically.

        A ``CopySource`` chunk is copied from another object of this store (``compose``)."""
        path = self._make_key_dirs(key)
        tmp = os.path.join(os.path.dirname(path), f"{TEMP_PREFIX}{uuid.uuid4().hex}")
        written = kicked = 0
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            raise io_failure(f"write failed: {exc.strerror or exc}", where=self._where(key), exc=exc) from exc
        try:
            for chunk in chunks:
                if isinstance(chunk, CopySource):
                    copied = self._copy_into(fd, chunk)
                    self.stats.add("copy_parts")
                    self.stats.add("bytes_copied", copied)
                    continue
                write_all(fd, chunk)
                written += len(chunk)
                if written - kicked >= WRITEBACK_BYTES:
                    os.posix_fadvise(fd, kicked, written - kicked, os.POSIX_FADV_DONTNEED)
                    kicked = written
        except BaseException as exc:
            os.close(fd)
            self._remove_quietly(tmp)
            if isinstance(exc, OSError) and not isinstance(exc, PreconditionFailed):
                raise io_failure(f"write failed: {exc.strerror or exc}", where=self._where(key), exc=exc) from exc
            raise
        self._publish(fd, tmp, key, path, if_absent=if_absent)
        self.stats.add("bytes_written", written)

    def _publish(self, fd: int, tmp: str, key: str, path: str, *, if_absent: bool) -> None:
        """Make the temp file ``tmp`` (open as ``fd``, closed here) durable, then the object under
        ``key`` (at ``path``): fsync, rename (``if_absent``: link, EEXIST if the key exists), fsync
        of the key's directory (and of the temp file's, when another). On failure the temp file is
        removed and nothing appears under the key."""
        directory = os.path.dirname(path)
        try:
            try:
                # The data must be on disk before the name points at it, or a
                # crash could leave the key naming an empty or partial file.
                os.fsync(fd)
                # Clean now: drop its pages, so uploading a WAL does not fill the page cache
                # of a live machine with objects nobody reads back soon.
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            if if_absent:
                # link() fails with EEXIST if the key exists: an atomic create-only.
                try:
                    os.link(tmp, path)
                except FileExistsError as exc:
                    raise PreconditionFailed("object already exists",
                                             where=self._where(key)) from exc
            else:
                os.rename(tmp, path)
        except PreconditionFailed:
            self._remove_quietly(tmp)
            raise
        except IsADirectoryError as exc:
            self._remove_quietly(tmp)
            raise UsageError("key names a directory of other keys (a local store cannot hold "
                             "both 'a' and 'a/...')", where=self._where(key)) from exc
        except OSError as exc:
            self._remove_quietly(tmp)
            raise io_failure(f"write failed: {exc.strerror or exc}", where=self._where(key), exc=exc) from exc
        except BaseException:
            self._remove_quietly(tmp)
            raise
        if if_absent:
            self._remove_quietly(tmp)
        try:
            # Makes the new name (and the temp name's removal) durable.
            fsync_dir(directory)
            if os.path.dirname(tmp) != directory:
                fsync_dir(os.path.dirname(tmp))
        except OSError as exc:
            raise IOFailure(f"fsync of directory failed: {exc.strerror}",
                            where=self._where(key)) from exc

    def _make_key_dirs(self, key: str) -> str:
        """The key's path, its directories made (and fsynced)."""
        path = self._path(key)
        try:
            self._make_dirs(os.path.dirname(path))
        except (FileExistsError, NotADirectoryError) as exc:
            raise UsageError("a directory of the key is an object (a local store cannot hold "
                             "both 'a' and 'a/...')", where=self._where(key)) from exc
        except OSError as exc:
            raise IOFailure(f"cannot create directory: {exc.strerror}",
                            where=self._where(key)) from exc
        return path

    def open_spool(self) -> "LocalSpool":
        """An object written before its key is known (upload writes an object's DataBlocks as it
        reads the WAL, and learns the object's id only afterwards): see LocalSpool (O_DIRECT where
        the filesystem takes it)."""
        return LocalSpool(self)

    @staticmethod
    def _remove_quietly(path: str) -> None:
        try:
            os.unlink(path)
        except OSError:
            pass

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        check_key(key)
        self.stats.add("put")
        self._commit(key, [bytes(data)], if_absent=if_absent)

    def put_large(self, key: str, data: bytes | Iterable[bytes], *,
                  part_size: int = DEFAULT_PART_BYTES) -> None:
        check_key(key)
        check_part_size(part_size)
        self.stats.add("put")
        self._commit(key, _written_as_given(data), if_absent=False)

    def compose(self, key: str, pieces: Sequence[bytes | CopySource]) -> None:
        check_key(key)
        for piece in pieces:
            if isinstance(piece, CopySource):
                check_key(piece.key)
                check_range(piece.start, piece.end)
        self.stats.add("put")
        self._commit(key, pieces, if_absent=False)

    # -- an object written in parts by several processes (walctl.store.multipart) --

    def create_multipart(self, key: str) -> str:
        return multipart.local_create(self, key)

    def put_part(self, key: str, upload_id: str, number: int, chunks: Iterable, position: int,
                 size: int | None = None) -> dict:
        return multipart.local_put_part(self, key, number, chunks, position, size)

    def complete_multipart(self, key: str, upload_id: str, parts: list[dict]) -> None:
        multipart.local_complete(self, key, multipart.ordered_parts(key, parts))

    def abort_multipart(self, key: str, upload_id: str) -> None:
        try:
            multipart.local_abort(self, key)
        except Exception:  # noqa: BLE001 - best effort on the way out (gc removes it with its prepared id)
            pass

    def delete(self, key: str) -> None:
        path = self._path(key)
        self.stats.add("delete")
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except NotADirectoryError:
            return
        except IsADirectoryError:
            return  # not an object: nothing to delete
        except OSError as exc:
            raise IOFailure(f"delete failed: {exc.strerror}", where=self._where(key)) from exc
        try:
            fsync_dir(os.path.dirname(path))
        except OSError as exc:
            raise IOFailure(f"fsync of directory failed: {exc.strerror}",
                            where=self._where(key)) from exc
