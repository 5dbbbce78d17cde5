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

``signals_deferred(mask=False)`` holds them with handlers instead of the mask, for a block that
starts a child process (compact starts Spark's JVM inside one: a child inherits a blocked mask,
and a JVM that cannot be interrupted outlives us). Its handlers hand the signal to the handler they
replaced while the block is open, so the CLI's handler holds its interrupt as above; a default
handler's KeyboardInterrupt is kept for the end of the block the same way.

While both signals' handler is one that holds (``holding_handler``: the CLI's), a block needs no
mask: that handler runs in the main thread between Python statements, whichever thread took the
signal, and keeps the interrupt for the block's end. Such a block costs no system call (the WAL
writer enters a few per block it writes; the mask took two pthread_sigmask calls each).
"""

from __future__ import annotations

import signal
import threading

try:  # the C functions behind signal.pthread_sigmask and getsignal, without their conversions to enums
    from _signal import getsignal as _getsignal  # (getsignal's raises and catches a ValueError for a function)
    from _signal import pthread_sigmask as _sigmask  # (twice as fast: it runs twice per block)
except ImportError:  # pragma: no cover - other Pythons
    from signal import getsignal as _getsignal
    from signal import pthread_sigmask as _sigmask

_get_ident = threading.get_ident
# The main thread's id, taken at import: Python runs signal handlers in that thread only, and walctl never
# forks from another thread (a fork keeps the forking thread's id). threading.main_thread().ident is two
# Python calls, in every section (the WAL writer enters a few a block; issue 31).
MAIN_IDENT = threading.main_thread().ident
_HELD_SIGNALS = {int(signal.SIGINT), int(signal.SIGTERM)}
_SIGINT, _SIGTERM = int(signal.SIGINT), int(signal.SIGTERM)


class _Held:
    """How deep the main thread is in signals_deferred blocks, and the interrupt the CLI's handler
    left for the end of the outermost one."""

    depth = 0
    interrupt: BaseException | None = None
    holder = None  # a handler that asks hold_interrupt first (holding_handler)


def holding_handler(handler) -> None:
    """Say that ``handler`` (as installed with signal.signal) asks ``hold_interrupt`` before it raises:
    while it handles both SIGINT and SIGTERM, signals_deferred blocks hold them without the mask."""
    _Held.holder = handler


def hold_interrupt(interrupt: BaseException) -> bool:
    """For the CLI's signal handler (it runs in the main thread): inside a signals_deferred block,
    keep ``interrupt`` to be raised as the block ends, and say so (True)."""
    if _Held.depth:
        _Held.interrupt = interrupt
        return True
    return False


def _deferring(previous):
    """A handler for a ``mask=False`` block: ``previous`` decides (the CLI's holds its interrupt),
    an exception it raises is kept for the block's end; SIG_DFL ends in a KeyboardInterrupt there."""

    def handler(signum, frame):
        if callable(previous):
            try:
                previous(signum, frame)
            except BaseException as exc:  # noqa: BLE001 - raised as the block ends
                _Held.interrupt = _Held.interrupt or exc
        elif previous != signal.SIG_IGN:
            _Held.interrupt = _Held.interrupt or KeyboardInterrupt()

    return handler


class signals_deferred:
    """Hold SIGINT/SIGTERM (main thread only) for a few statements that must not be split.

    ``mask=False``: by handlers rather than the signal mask (a block that starts a child process).
    A class rather than a generator context manager: it runs twice per block.
    """

    __slots__ = ("previous", "mask", "handlers", "held")

    def __init__(self, *, mask: bool = True):
        self.mask = mask

    def __enter__(self):
        self.previous = self.handlers = None
        self.held = False
        if _get_ident() == MAIN_IDENT:
            self.held = True
            if self.mask:
                holder = _Held.holder
                if holder is None or _getsignal(_SIGTERM) is not holder or _getsignal(_SIGINT) is not holder:
                    self.previous = _sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
            else:
                self.handlers = {sig: signal.getsignal(sig) for sig in _HELD_SIGNALS}
                for sig, handler in self.handlers.items():
                    signal.signal(sig, _deferring(handler))
            _Held.depth += 1
        return self

    def __exit__(self, *exc):
        if not self.held:
            return False
        if self.previous is not None:
            _sigmask(signal.SIG_SETMASK, self.previous)  # (a signal the mask held: handled from here,
        elif self.handlers is not None:                  # still held until the depth is down)
            for sig, handler in self.handlers.items():
                signal.signal(sig, handler)
        _Held.depth -= 1
        if not _Held.depth and _Held.interrupt is not None:
            interrupt, _Held.interrupt = _Held.interrupt, None
            raise interrupt
        return False
