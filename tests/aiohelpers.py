"""Submitting to an AIO write queue from a test (tests/device/test_aio_backends.py,
tests/cli/test_bench.py)."""

from __future__ import annotations

import time


def submit_when_free(queue, offset: int, buf, callback, done, *, reaper: bool, length: int | None = None) -> None:
    """``queue.submit``, waiting for a completion while every slot is busy (its ValueError): with a
    reaper thread, until ``callback`` released the semaphore ``done`` (taken and given back, so the
    caller still counts every completion); without, in ``queue.wait``."""
    while True:
        try:
            queue.submit(offset, buf, callback, length=length)
            return
        except ValueError:  # every slot busy: let one complete
            if reaper:
                done.acquire()
                done.release()
                time.sleep(0.0005)
            else:
                queue.wait(1.0)
