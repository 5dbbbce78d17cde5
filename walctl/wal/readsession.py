"""The read-only open the readers use (recover, status, read --wal): ``open_reader`` and the
RecoverSession that tells whether the WAL moved under a scan (docs/CLI.md "Readers racing a writer").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass

from walctl.device.opening import open_device
from walctl.errors import UsageError, WalctlError
from walctl.format.header import WalHeader
from walctl.wal.headers import HeaderState, read_headers
from walctl.wal.lifecycle import read_wal_state

if TYPE_CHECKING:
    from walctl.device.base import Device


# A reader that found damage re-reads the header slots; while they keep changing under it (a
# writer starting, stopping or trimming), it scans again, at most this many times (each rescan
# reads the log once more), then reports that the log moved instead of judging it.
RESCANS = 3


@dataclass
class RecoverSession:
    """An open read-only view of a WAL for the readers (recover, status, read --wal).

    The race it answers (docs/CLI.md "Readers racing a writer"): a reader takes no lock, so a
    writer may start, append, trim (and wrap over what it trimmed) or stop while the reader
    scans. Every such change is preceded by a write of a header slot (a start marks the log
    ungraceful before its first block; a trim is durable before the ring space is reused; a
    stop drains its blocks, then marks the log clean). So damage that the scan found while
    the slots stayed as they were at open (``moved()`` says None) is on the device; damage
    found after they changed may be the writer's work in progress, judged by a rescan
    (``settled_scan``) of the log as it is then.
    """

    dev: object
    state: HeaderState
    warnings: list[str]
    writer_pid: int | None
    path: str = ""
    block_size: int | None = None  # the --block-size the slots were read at (AutoMQ WALs)

    def moved(self) -> str | None:
        """What changed since the header slots were read (open, or the last ``refresh``): the
        slots (a writer started, stopped or trimmed) or the lock's holder; None when neither."""
        try:
            now = self._read_state()
        except WalctlError as exc:  # (a slot being rewritten reads torn: the other one stands)
            return f"the header slots could not be read again ({exc.what})"
        if _slot_identity(now) != _slot_identity(self.state):
            return _describe_move(self.state.header, now.header)
        holder = self.writer_now()
        if holder != self.writer_pid:
            return ("a writer (pid %d) took the lock" % holder if holder is not None
                    else f"the writer (pid {self.writer_pid}) released the lock")
        return None

    def writer_now(self) -> int | None:
        """The pid holding the writer lock now (None: no writer, or unknown)."""
        from walctl.device.locks import lock_holder

        try:
            return lock_holder(self.path) if self.path else None
        except OSError:
            return None

    def refresh(self) -> None:
        """Read the header slots and the lock holder again: what a rescan starts from."""
        self.state = self._read_state()
        self.writer_pid = self.writer_now()

    def settled_scan(self, scan, attempts: int = RESCANS):
        """Scan again while the log moves: ``scan(session)`` (a whole scan from ``self.state``,
        returning a ScanResult) runs after a ``refresh``; a result with no damage a crash does
        not explain, or one the slots did not move under, is settled.

        Returns (result, settled, rescans): the last scan's result; settled False when the log
        moved under every one of ``attempts`` rescans (its damage then is not judged).
        """
        result = None
        for n in range(1, attempts + 1):
            self.refresh()
            result = scan(self)
            if not result.corrupt or self.moved() is None:
                return result, True, n
        return result, False, attempts

    def _read_state(self) -> HeaderState:
        if self.block_size is not None and self.state.header.flavour != "walctl":
            return _with_block_size(self.dev, read_wal_state(self.dev, self.path), self.block_size, self.path)
        return read_wal_state(self.dev, self.path)


def _slot_identity(state: HeaderState) -> tuple:
    """What tells two reads of the slots apart: each slot's header (every write of a slot
    carries a later timestamp) and checkpoint; a damaged slot by its error's text."""
    return tuple((s.index, s.header, s.checkpoint, None if s.error is None else str(s.error)) for s in state.slots)


def _describe_move(before: WalHeader, after: WalHeader) -> str:
    """How the current header changed, in words (for the 'log moved' warning)."""
    if before.clean and not after.clean:
        what = "a writer started"
    elif not before.clean and after.clean:
        what = "the writer stopped"
    elif after.trim_offset != before.trim_offset:
        what = f"the log was trimmed ({before.trim_offset} -> {after.trim_offset})"
    elif after.next_offset != before.next_offset:
        what = f"a writer appended (nextOffset {before.next_offset} -> {after.next_offset})"
    else:
        what = "a header slot was rewritten"
    return f"{what} while it was read"


def open_reader(path: str, *, block_size: int | None = None) -> RecoverSession:
    """Open read-only (no lock, never writes); the device warns when a writer holds it.

    ``block_size``: an AutoMQ WAL's block size as its JVM ran (recover --block-size): its
    header slots are read again at 0 and that size. Raises UsageError for a walctl WAL
    whose block size (4096) it is not.
    """
    from walctl.device.locks import lock_holder

    dev = open_device(path, writable=False)
    try:
        state = read_wal_state(dev, path)
        if block_size is not None:
            state = _with_block_size(dev, state, block_size, path)
    except BaseException:
        dev.close()
        raise
    warnings = list(dev.warnings)
    pid = None
    try:
        pid = lock_holder(path)
    except OSError:
        pid = None
    return RecoverSession(dev, state, warnings, pid, path, block_size)


def _with_block_size(dev: Device, state: HeaderState, size: int, path: str) -> HeaderState:
    """The header slots read again at 0 and ``size`` (AutoMQ WALs only)."""
    if state.header.flavour == "walctl":
        if size == state.header.block_size:
            return state
        raise UsageError("--block-size applies to AutoMQ WALs only; walctl's own use 4096", where=path,
                         hint="drop --block-size")
    try:
        return read_headers(dev, block_size=size)
    except WalctlError as exc:
        raise exc.at(path)
