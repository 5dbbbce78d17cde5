"""Creating a WAL file and durably zeroing a range of a device."""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from typing import Callable

from walctl.device.base import Device, io_failure
from walctl.device.buffers import aligned_buffer, check_aligned
from walctl.device.fdio import FdDevice
from walctl.device.opening import open_error
from walctl.errors import RefusedError

BLKZEROOUT = 0x127F         # _IO(0x12, 127): zero a range given as u64 {start, len}

# Zeroing moves this much per write: large enough to stream at device speed,
# small enough that one buffer costs little memory and progress stays lively.
ZERO_CHUNK_BYTES = 8 << 20


def create_file(path: str, size_bytes: int) -> None:
    """Create a new regular file of exactly ``size_bytes`` and make its existence durable.

    Raises:
        ValueError: negative size.
        RefusedError: the path already exists.
        NotFoundError: the parent directory does not exist.
        IOFailure: any other failure (the partial file is removed).
    """
    if size_bytes < 0:
        raise ValueError(f"size_bytes must not be negative, got {size_bytes}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError as exc:
        raise RefusedError("file already exists", where=path,
                           hint="choose another path, or use the existing file") from exc
    except OSError as exc:
        raise open_error(exc, path) from exc
    try:
        try:
            os.ftruncate(fd, size_bytes)  # sparse: blocks are allocated as the WAL writes
            # fsync (not fdatasync): the size is metadata that must survive a crash.
            os.fsync(fd)
        finally:
            os.close(fd)
        # The new directory entry is durable only once the parent directory is synced.
        dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        try:
            os.unlink(path)
        except OSError:
            pass
        raise io_failure(f"cannot create: {exc.strerror}", where=path, exc=exc) from exc
    except BaseException:  # SIGTERM/SIGINT (walctl.cli.Interrupted) mid-way: no half-made file stays
        try:
            os.unlink(path)
        except OSError:
            pass
        raise


def zero_fill(dev: Device, offset: int, length: int,
              progress: Callable[[int], None] | None = None) -> None:
    """Durably write zeros over [offset, offset + length).

    On a block device the BLKZEROOUT ioctl is tried first (the kernel or the
    device zeroes without moving data from us); otherwise, or when it is not
    supported, zeros are written in ZERO_CHUNK_BYTES pieces.

    Args:
        progress: called with the number of bytes zeroed so far after each piece.
    Raises:
        ValueError: misaligned range, a range past the end, or a read-only device.
        IOFailure: the device failed.
    """
    check_aligned(offset, length)
    if not dev.writable:
        raise ValueError(f"device opened read-only: {dev.path}")
    if offset + length > dev.size_bytes:
        raise ValueError(f"zero range [{offset}, {offset + length}) passes the end of "
                         f"{dev.path} ({dev.size_bytes} bytes)")
    if dev.is_block_device and hasattr(dev, "fileno") and _zeroout(dev, offset, length, progress):
        return
    chunk = min(ZERO_CHUNK_BYTES, length)
    # No explicit close of the mmap: after a failed write the traceback still holds
    # a slice of it, and close() would then raise BufferError over the real error.
    zeros = aligned_buffer(chunk)
    with memoryview(zeros) as mv:
        done = 0
        while done < length:
            n = min(chunk, length - done)
            # pwrite is durable on return (O_DSYNC or fdatasync), so each piece is.
            dev.pwrite(offset + done, mv[:n])
            done += n
            if progress is not None:
                progress(done)


def _zeroout(dev: FdDevice, offset: int, length: int, progress: Callable[[int], None] | None) -> bool:
    """Zero with BLKZEROOUT in chunks; False when the ioctl is unsupported (nothing written yet)."""
    fd = dev.fileno()
    # Chunks only so progress moves; each ioctl is one call into the block layer.
    chunk = 64 * ZERO_CHUNK_BYTES
    done = 0
    while done < length:
        n = min(chunk, length - done)
        try:
            fcntl.ioctl(fd, BLKZEROOUT, struct.pack("=QQ", offset + done, n))
        except OSError as exc:
            if done == 0 and exc.errno in (errno.ENOTTY, errno.EOPNOTSUPP, errno.EINVAL):
                return False
            raise io_failure(f"BLKZEROOUT failed: {exc.strerror}", where=dev.path,
                              offset=offset + done, exc=exc) from exc
        done += n
        if progress is not None:
            progress(done)
    # BLKZEROOUT waits for the writes to complete but does not flush the disk's
    # volatile cache; the flush makes the wipe durable before init writes a header.
    dev.flush()
    return True
