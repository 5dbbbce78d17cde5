"""The upload lease: one upload of a WAL at a time (walctl.pipeline.upload), beside its writer."""

from __future__ import annotations

import errno
import os

# The upload lease: an exclusive open-file-description lock (F_OFD_SETLK) on one byte of the WAL
# device far past any data. OFD locks and flock are independent on Linux, so it never touches the
# writer's flock, and it is released when its descriptor closes (a SIGKILLed upload frees it).
# Two descriptors in one process exclude each other too (an OFD lock belongs to its open file).
LEASE_OFFSET = 1 << 62
LEASE_POLL_S = 0.05
# struct flock (x86-64, arm64): l_type, l_whence, l_start, l_len, l_pid (walctl.device.locks' trim mark too)
FLOCK_FORMAT = "hhqqi4x"


class Lease:
    """A held lease; ``release()`` (or closing the process) gives it back."""

    def __init__(self, fd: int):
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


def take_lease(path: str, *, wait_s: float, on_wait=None, offset: int = LEASE_OFFSET) -> Lease | None:
    """Take the exclusive lease on ``path`` (see LEASE_OFFSET), waiting up to ``wait_s`` while another
    open file holds it; None if it is still held then. ``on_wait()`` is called once if it must wait.

    Raises:
        OSError: ``path`` cannot be opened for writing (an OFD write lock needs it), or the kernel
            has no OFD locks.
    """
    import fcntl
    import struct
    import time

    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    request = struct.pack(FLOCK_FORMAT, fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0)
    deadline = time.monotonic() + wait_s
    waited = False
    try:
        while True:
            try:
                fcntl.fcntl(fd, fcntl.F_OFD_SETLK, request)
                return Lease(fd)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            if not waited and on_wait is not None:
                on_wait()
            waited = True
            time.sleep(LEASE_POLL_S)
    except BaseException:
        try:
            os.close(fd)
        except OSError:
            pass
        raise
