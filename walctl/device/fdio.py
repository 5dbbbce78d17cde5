"""Devices behind a file descriptor: O_DIRECT (``DirectDevice``) and buffered (``BufferedDevice``)."""

from __future__ import annotations

import fcntl
import os
import stat
import struct
import threading
import time

from walctl.device.base import CheckedDevice, io_failure
from walctl.device.buffers import ALIGN, check_buffer

# Block-device ioctls from <linux/fs.h>; the fcntl module does not export them.
BLKSSZGET = 0x1268          # _IO(0x12, 104): logical block size, int
BLKGETSIZE64 = 0x80081272   # _IOR(0x12, 114, size_t): size in bytes, u64

class _ReadCounter(threading.local):
    """Bytes read from devices by the calling thread (every ``pread_into`` of an fd device): the
    budget tests and bench/continuous_bench.py count what an open, a trim or a status costs.
    Per thread, so a background thread (an upload beside the writer) does not blur the count."""

    bytes = 0


_read_counter = _ReadCounter()


def bytes_read_total() -> int:
    """Device bytes the calling thread has read so far (all fd devices)."""
    return _read_counter.bytes


def add_bytes_read(count: int) -> None:
    """Count ``count`` bytes a helper thread read (upload's read-ahead) as the calling thread's reads."""
    _read_counter.bytes += count


class FdDevice(CheckedDevice):
    """A device behind an open file descriptor; subclasses choose the flush discipline."""

    direct = False

    def __init__(self, path: str, fd: int, *, writable: bool, warnings: list[str] | None = None):
        """Wrap an fd opened (and, for writers, locked) by ``open_device``; takes ownership of it."""
        self.path = path
        self._fd = fd
        self.writable = writable
        self.warnings = list(warnings or [])
        st = os.fstat(fd)
        self.is_block_device = stat.S_ISBLK(st.st_mode)
        if self.is_block_device:
            self.size_bytes = struct.unpack("=Q", fcntl.ioctl(fd, BLKGETSIZE64, bytes(8)))[0]
            self.logical_block_size = struct.unpack("=i", fcntl.ioctl(fd, BLKSSZGET, bytes(4)))[0]
        else:
            self.size_bytes = st.st_size
            self.logical_block_size = ALIGN

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.path!r}, size_bytes={self.size_bytes}, "
                f"writable={self.writable})")

    def fileno(self) -> int:
        """The underlying fd, for ioctls such as BLKZEROOUT."""
        self._check_open()
        return self._fd

    def _closed(self) -> bool:
        return self._fd < 0

    def pread_into(self, offset: int, buf) -> None:
        """Fill ``buf`` from ``offset``; raises IOFailure on an error or the end of the device."""
        with check_buffer(buf) as mv:
            self._check_read(offset, mv)
            want = mv.nbytes
            done = 0
            while done < want:
                pos = offset + done
                if self.direct and pos % ALIGN:
                    # O_DIRECT stops short of a block only at the end of a file whose
                    # size is not a multiple of 4096; the next read would be EINVAL.
                    break
                try:
                    got = os.preadv(self._fd, [mv[done:]], pos)
                except OSError as exc:
                    raise io_failure(f"read failed: {exc.strerror}", where=self.path,
                                      offset=pos, exc=exc) from exc
                if got == 0:
                    break
                done += got
            _read_counter.bytes += done
            if done < want:
                raise io_failure(f"short read: got {done} of {want} bytes (end of device)",
                                  where=self.path, offset=offset + done)

    def pwrite(self, offset: int, buf) -> int:
        """Write all of ``buf`` at ``offset``; durable when it returns.

        Returns the ns spent making it durable after the write (fdatasync; 0 with O_DSYNC), the
        latency breakdown's "flush" stage.
        """
        with check_buffer(buf) as mv:
            self._check_write(offset, mv)
            want = mv.nbytes
            done = 0
            while done < want:
                pos = offset + done
                try:
                    put = os.pwrite(self._fd, mv[done:], pos)
                except OSError as exc:
                    raise io_failure(f"write failed: {exc.strerror}", where=self.path,
                                      offset=pos, exc=exc) from exc
                if put == 0:
                    raise io_failure(f"short write: wrote {done} of {want} bytes",
                                      where=self.path, offset=pos)
                done += put
            return self._make_durable(offset)

    def _make_durable(self, offset: int) -> int:  # pragma: no cover - overridden
        """Make the bytes just written durable; return the ns it took (0: already durable)."""
        raise NotImplementedError

    def flush(self) -> None:
        """Flush the page cache and the device's volatile cache (fdatasync)."""
        self._check_open()
        if not self.writable:
            return  # nothing of ours can be dirty
        try:
            # fdatasync on a block device also sends a cache flush to the disk, so
            # everything written through this fd before the call is on stable storage.
            os.fdatasync(self._fd)
        except OSError as exc:
            raise io_failure(f"fdatasync failed: {exc.strerror}", where=self.path, exc=exc) from exc

    def close(self) -> None:
        """Close the fd; idempotent. Closing the fd releases the writer's flock."""
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        try:
            os.close(fd)
        except OSError as exc:
            raise io_failure(f"close failed: {exc.strerror}", where=self.path, exc=exc) from exc


class DirectDevice(FdDevice):
    """O_DIRECT (+ O_DSYNC when writable): no page cache, each pwrite durable on return."""

    direct = True

    def _make_durable(self, offset: int) -> int:
        # Nothing to do, and that is the point: O_DIRECT bypasses the page cache but
        # does not empty a volatile disk cache; the fd was opened with O_DSYNC, so
        # the kernel returned from pwrite only after the device flushed (FUA or a
        # cache flush). That return is the promise the WAL's acknowledgement relies on.
        return 0


class BufferedDevice(FdDevice):
    """Page-cache I/O + fdatasync after every write, for filesystems that refuse O_DIRECT."""

    direct = False

    def _make_durable(self, offset: int) -> int:
        # The write only reached the page cache; fdatasync pushes it to the device
        # and flushes the device's volatile cache, so on return the bytes are as
        # durable as an O_DIRECT|O_DSYNC write: the WAL's acknowledgement relies on it.
        started_ns = time.perf_counter_ns()
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            raise io_failure(f"fdatasync failed: {exc.strerror}", where=self.path,
                              offset=offset, exc=exc) from exc
        return time.perf_counter_ns() - started_ns
