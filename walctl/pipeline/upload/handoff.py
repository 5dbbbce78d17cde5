"""Upload's trim hand-off: after the commit, trim the WAL to the last uploaded record, directly or
through the running writer's hand-off socket (FORMATS.md 1.7).

The trim takes the WAL by its path (walctl.wal.handoff and walctl.wal.lifecycle open it writable,
with the writer lock, or ask the writer that holds it): the upload's own handle is read-only and
lock-free, so a writer may run during the upload.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from walctl.errors import TrimPendingError, UsageError

if TYPE_CHECKING:
    from walctl.pipeline.upload.plan import UploadResult
    from walctl.pipeline.upload.scanindex import _Records


def trim_after_commit(wal_path: str, trim_offset: int, records: _Records, result: UploadResult, *, trim: bool,
                      timeout_s: float) -> None:
    """Trim to ``result.last_offset``, or to the last good record before the first bad one (left
    live for 'recover', with a warning); sets ``result.trimmed_to``. Nothing when ``trim`` is off or
    the WAL is trimmed that far already (``trim_offset``)."""
    trim_to = result.last_offset
    bad = records.bad
    if bad:
        from walctl import sizes

        # Leave the first bad record live for 'recover': trim only to the last record before it.
        trim_to = records.good_before_bad
        first = bad[0]
        result.warnings.append(
            f"{sizes.plural(len(bad), 'record')} "
            f"{'is not a StreamRecordBatch and was' if len(bad) == 1 else 'are not StreamRecordBatches and were'} "
            f"not uploaded (first at WAL offset "
            f"{first.offset}); the WAL is not trimmed past it: save it with 'walctl recover {wal_path} "
            f"--from {first.offset} --to {first.offset + 1} --payload hex', then drop it with "
            f"'walctl trim {wal_path} {max(records.last_good or -1, bad[-1].offset)}'")
    if trim and trim_to is not None and trim_to > trim_offset:
        result.trimmed_to = _trim_after(wal_path, trim_to, result.warnings, timeout_s)


def _trim_after(wal_path: str, offset: int, warnings: list[str], timeout_s: float) -> int | None:
    """Trim to the last uploaded record: directly, or by the running writer through its hand-off
    socket (FORMATS.md 1.7), retrying up to ``timeout_s``; TrimPendingError when neither happened.
    A moved trim point (someone trimmed past it) only costs a warning (upload is idempotent)."""
    from walctl.wal.handoff import trim_or_hand_off
    from walctl.wal.lifecycle import trim_scanned

    try:
        # The upload's scan has just read the record at ``offset``: the trim checks its header only.
        how = trim_or_hand_off(wal_path, offset, timeout_s, trim_scanned)
        if how == "writer":
            warnings.append(f"{wal_path}: a writer is active; it took the trim to {offset}")
        return offset
    except UsageError as exc:
        warnings.append(f"{wal_path}: not trimmed ({exc.what}); the next upload skips what is already uploaded")
        return None
    except TrimPendingError as exc:
        raise _naming_the_writer(exc, wal_path) from None


def _naming_the_writer(exc: TrimPendingError, wal_path: str) -> TrimPendingError:
    """The exit-8 error naming the pid that holds the WAL's writer lock and did not take the trim
    (stopped with SIGSTOP, busy, or without the hand-off): the operator's next step is that process."""
    from walctl.device.locks import lock_holder, trim_holding

    pid = lock_holder(wal_path)
    trim = trim_holding(wal_path, pid)
    if trim is not None:  # a trim (marked, FORMATS.md 1.8; the refusal in exc.what names it), no writer
        exc.hint = (f"see what pid {trim.pid} is doing; rerun upload once it is done (it skips what is "
                    f"committed), or pass --no-trim")
        return exc
    if pid is None:
        return exc
    exc.what = f"{exc.what}; writer pid {pid} holds the WAL and did not answer"
    exc.hint = (f"is pid {pid} stopped (kill -CONT {pid}) or running without the trim hand-off? "
                f"rerun upload (it skips what is committed), or pass --no-trim")
    return exc
