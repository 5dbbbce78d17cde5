"""Positioned, aligned, durable I/O on a block device or a regular file: the old single-module name.

The code lives in rooms beside this module; import from them in new code:

    base        the ``Device`` protocol, the shared argument checks, ``io_failure``
    fdio        ``DirectDevice`` (O_DIRECT) and ``BufferedDevice`` (page cache + fdatasync),
                ``bytes_read_total`` (the calling thread's device reads)
    fakes       ``MemoryDevice`` and ``FaultyDevice`` for tests
    aio         ``AioWriteQueue``: Linux native AIO
    writequeue  the WriteQueue contract, ``ThreadWriteQueue``, ``open_write_queue``
    opening     ``open_device`` and the errno -> walctl error mapping
    locks       ``/proc/locks``: ``parse_proc_locks``, ``lock_holder``
    create      ``create_file`` and ``zero_fill``

This module re-exports their names so that ``from walctl.device.blockio import X`` keeps working.
"""

# The modules, too: tests patch ``blockio.os.pwrite`` / ``blockio.fcntl.ioctl`` (module-wide patches).
import fcntl  # noqa: F401
import os  # noqa: F401

from walctl.device.aio import AioWriteQueue
from walctl.device.base import CheckedDevice, Device, WriteDone, io_failure
from walctl.device.create import BLKZEROOUT, ZERO_CHUNK_BYTES, create_file, zero_fill
from walctl.device.fakes import FaultyDevice, MemoryDevice
from walctl.device.fdio import (
    BLKGETSIZE64,
    BLKSSZGET,
    BufferedDevice,
    DirectDevice,
    FdDevice,
    bytes_read_total,
)
from walctl.device.locks import LockEntry, lock_holder, parse_proc_locks
from walctl.device.opening import BUFFERED_WARNING, open_device, open_error
from walctl.device.writequeue import (
    IO_ENGINE_ENV,
    IO_ENGINES,
    ThreadWriteQueue,
    open_write_queue,
)

__all__ = [
    "AioWriteQueue",
    "BLKGETSIZE64",
    "BLKSSZGET",
    "BLKZEROOUT",
    "BUFFERED_WARNING",
    "BufferedDevice",
    "CheckedDevice",
    "Device",
    "DirectDevice",
    "FaultyDevice",
    "FdDevice",
    "IO_ENGINES",
    "IO_ENGINE_ENV",
    "LockEntry",
    "MemoryDevice",
    "ThreadWriteQueue",
    "WriteDone",
    "ZERO_CHUNK_BYTES",
    "bytes_read_total",
    "create_file",
    "io_failure",
    "lock_holder",
    "open_device",
    "open_error",
    "open_write_queue",
    "parse_proc_locks",
    "zero_fill",
]
