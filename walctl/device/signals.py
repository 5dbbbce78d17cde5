"""Holding SIGINT/SIGTERM for a few statements that must not be split (docs/CLI.md "Signals").

Every command turns SIGTERM and SIGINT into an exception raised in the main thread, wherever
it is. Code that takes completions off a queue and books them (the WAL writer, the AIO
queue's reaping) must not be cut between the two, or the completions are lost and a drain
waits for them forever: such code runs inside ``signals_deferred()``; so does each piece of
output a command writes whole (walctl.commands._shared.write_lines). A signal that arrives
meanwhile is raised as the (outermost) block ends: held in the kernel when it comes to the
main thread (its mask), and held by the CLI's handler when another thread of the process takes
it (a mask is per thread; the handler runs in the main thread all the same): the handler asks
``hold_interrupt`` first.
"""

from __future__ import annotations

import signal
import threading

try:  # the C function behind signal.pthread_sigmask, without its conversion of the mask to enums
    from _signal import pthread_sigmask as _sigmask  # (twice as fast: it runs twice per block)
except ImportError:  # pragma: no cover - other Pythons
    from signal import pthread_sigmask as _sigmask

_HELD_SIGNALS = {int(signal.SIGINT), int(signal.SIGTERM)}


class _Held:
    """How deep the main thread is in signals_deferred blocks, and the interrupt the CLI's handler
    left for the end of the outermost one."""

    depth = 0
    interrupt: BaseException | None = None


def hold_interrupt(interrupt: BaseException) -> bool:
    """For the CLI's signal handler (it runs in the main thread): inside a signals_deferred block,
    keep ``interrupt`` to be raised as the block ends, and say so (True)."""
    if _Held.depth:
        _Held.interrupt = interrupt
        return True
    return False


class signals_deferred:
    """Hold SIGINT/SIGTERM (main thread only) for a few statements that must not be split.

    A class rather than a generator context manager: it runs twice per block.
    """

    __slots__ = ("previous",)

    def __enter__(self):
        self.previous = None
        if threading.get_ident() == threading.main_thread().ident:
            self.previous = _sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
            _Held.depth += 1
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            _sigmask(signal.SIG_SETMASK, self.previous)  # (a signal the mask held: handled from here,
            _Held.depth -= 1                              # still held until the depth is down)
            if not _Held.depth and _Held.interrupt is not None:
                interrupt, _Held.interrupt = _Held.interrupt, None
                raise interrupt
        return False
