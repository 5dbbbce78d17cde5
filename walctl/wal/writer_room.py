"""The WAL writer's backpressure (walctl.wal.writer): no block ends more than one ring past the trim
point. A record that would end past it waits up to ``FullWait.wait_s`` for a trim to free room
(appends block, nothing is dropped; the wait starts again whenever a trim frees some room), then
FullError. ``RoomKeeper`` is the part of WalWriter that keeps that bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from walctl.errors import FullError


@dataclass
class FullWait:
    """Backpressure: how long an append waits for a trim to free room in a full ring before
    FullError (``wait_s``, 0: at once), who is told when a wait starts (``on_full(True)``) and ends
    (``on_full(False)``), what says why nothing freed room (``why()``, for FullError), and counts."""

    wait_s: float = 0.0
    on_full: Callable[[bool], None] | None = None
    why: Callable[[], str] | None = None
    waits: int = 0  # how many times appends were held back
    total_s: float = 0.0  # for how long in all



class RoomKeeper:
    """WalWriter's room check against the trim point (its state is WalWriter's: see its __init__)."""

    def _set_room_end(self) -> None:
        self._room_end = max(self.state.header.trim_offset, 0) + self._ring_bytes

    def _make_room(self, end: int) -> bool:
        """Nothing when the log may reach ``end``; else wait for a trim (``full.wait_s``, restarted
        by each trim that frees some room) and return True once it may, or raise FullError."""
        if end <= self._room_end:
            return False
        full = self.full
        if full.wait_s > 0:
            self._wait_for_room(end, full)
        if end > self._room_end:
            why = full.why() if full.why is not None else None
            waited = f" for {full.wait_s:g} s" if full.wait_s > 0 else ""
            raise FullError(f"WAL full: nothing freed room{waited}" + (f" ({why})" if why else ""),
                            hint="trim or upload first: 'walctl upload' beside the writer (it trims through "
                                 "the hand-off), append --upload-at, or a longer --full-wait",
                            offset=self.trim_start + self.ring.size)
        return True

    def _wait_for_room(self, end: int, full: FullWait) -> None:
        """Hold the appender until the ring has room up to ``end``, the wait runs out, or the writer
        fails. Closed blocks keep being written meanwhile (their completions wake it), so the
        acknowledged log an uploader can upload keeps growing up to the full ring."""
        full.waits += 1
        started = time.monotonic()
        deadline = started + full.wait_s
        room = self._room_end
        if full.on_full is not None:
            full.on_full(True)
        try:
            self._pump(wait=False)
            while end > self._room_end:
                self._check_usable()
                now = time.monotonic()
                if self._room_end > room:  # a trim freed some room, not enough yet: wait again
                    room, deadline = self._room_end, now + full.wait_s
                if now >= deadline:
                    return
                self._lock.wait(min(deadline - now, 1.0))
        finally:
            full.total_s += time.monotonic() - started
            if full.on_full is not None:
                full.on_full(False)
