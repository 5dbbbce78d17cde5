"""Holding SIGINT/SIGTERM for a few statements that must not be split (docs/CLI.md "Signals").

Every command turns SIGTERM and SIGINT into an exception raised in the main thread, wherever
it is. Code that takes completions off a queue and books them (the WAL writer, the AIO
queue's reaping) must not be cut between the two, or the completions are lost and a drain
waits for them forever: such code runs inside ``signals_deferred()``. A signal that arrives
meanwhile stays pending in the kernel and is handled as the block ends.
"""

from __future__ import annotations

import signal
import threading

try:  # the C function behind signal.pthread_sigmask, without its conversion of the mask to enums
    from _signal import pthread_sigmask as _sigmask  # (twice as fast: it runs twice per block)
except ImportError:  # pragma: no cover - other Pythons
    from signal import pthread_sigmask as _sigmask

_HELD_SIGNALS = {int(signal.SIGINT), int(signal.SIGTERM)}


class signals_deferred:
    """Hold SIGINT/SIGTERM (main thread only) for a few statements that must not be split.

    A class rather than a generator context manager: it runs twice per block.
    """

    __slots__ = ("previous",)

    def __enter__(self):
        self.previous = None
        if threading.get_ident() == threading.main_thread().ident:
            self.previous = _sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            _sigmask(signal.SIG_SETMASK, self.previous)
        return False
