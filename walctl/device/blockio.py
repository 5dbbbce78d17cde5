"""The old single-module name of walctl's device I/O, for the callers that still import it.

The code lives in rooms beside this module; import from them in new code:

    base        the ``Device`` protocol, the shared argument checks, ``io_failure``
    fdio        ``DirectDevice`` (O_DIRECT) and ``BufferedDevice`` (page cache + fdatasync),
                ``bytes_read_total`` (the calling thread's device reads)
    fakes       ``MemoryDevice`` and ``FaultyDevice`` for tests
    aio         ``AioWriteQueue``: io_uring, or Linux native AIO
    writequeue  the WriteQueue contract, ``ThreadWriteQueue``, ``open_write_queue``
    opening     ``open_device`` and the errno -> walctl error mapping
    locks       ``/proc/locks``: ``parse_proc_locks``, ``lock_holder``
    create      ``create_file`` and ``zero_fill``
    prefetch    ``ReadAhead`` and ``BufferPool``: the readers' one read-ahead and buffer pool

It re-exports only what callers outside device/ still import from here (commands/, bench/,
wal/image.py and their tests; issue 29 item 5): the names nothing imports were dropped.
"""

from walctl.device.aio import AioWriteQueue
from walctl.device.create import create_file, zero_fill
from walctl.device.fdio import bytes_read_total
from walctl.device.opening import open_device
from walctl.device.writequeue import IO_ENGINE_ENV, open_write_queue

__all__ = ["AioWriteQueue", "IO_ENGINE_ENV", "bytes_read_total", "create_file", "open_device", "open_write_queue",
           "zero_fill"]
