"""Helpers for tests where other threads (or processes) run beside the test's own.

- this_thread_only(fake, real): a stand-in for a process-wide function (``time.sleep``, a clock): a
  module's ``time`` is the time module itself, so a monkeypatch of ``mod.time.sleep`` reaches every
  thread, a writer's completion thread or one an earlier test left in the same xdist worker among
  them. The wrapper calls ``fake`` in the thread that made it and ``real`` in any other.
- wait_until(predicate, timeout_s): poll until another thread's or process's progress shows.
"""

from __future__ import annotations

import threading
import time


def this_thread_only(fake, real):
    """``fake`` when called from the thread calling this, ``real`` from any other."""
    me, ident = threading.get_ident(), threading.get_ident

    def call(*args):
        return fake(*args) if ident() == me else real(*args)

    return call


def wait_until(predicate, timeout_s: float = 60.0) -> None:
    """Poll ``predicate`` every 10 ms until it holds; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
