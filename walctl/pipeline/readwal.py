"""``walctl read``'s WAL tail: the stream's records still in the WAL after the store's upload mark.

The part of StreamReader (walctl.pipeline.read) that reads the WAL (read-only, no lock, like
recover), steps 1 and 4 of the race described in walctl.pipeline.read's module doc: the header
slots first (``_open_wal``), then, after the manifest, the records after the upload mark; a range
missing from both the store and the WAL is a gap only when nothing moved under the pass (``_moved``).
"""

from __future__ import annotations

import os
from typing import Iterator

from walctl.pipeline.readresult import GAP, WAL_DAMAGE, ReadFinding, ReadRecord
from walctl.store import manifest as mf


class WalTail:
    """StreamReader's reading of the WAL's tail (a mixin: the reader's state is its own)."""

    def _open_wal(self):
        from walctl.wal.readsession import open_reader

        return open_reader(self.wal)

    def _wal_pass(self, doc: mf.Manifest, number: int, session) -> Iterator[ReadRecord | ReadFinding]:
        """The stream's records in the WAL after its last uploaded record (read-only, no lock), from
        the header slots ``session`` read before manifest ``number`` (``doc``) was listed. Stops
        early, setting ``_unsettled``, where the WAL or the manifest moved under it."""
        from walctl.wal import reader

        header = session.state.header
        mark = doc.upload_mark(header.node_id)
        uploaded = mark.offset if mark is not None else -1
        result = reader.ScanResult(header, reader.Ring(header.capacity))
        scan = reader.Scan(session.dev, header, report=result, probe=session.writer_pid is None)
        hole = False  # a range of the log skipped before this record: its blocks may be in flight
        pause = os.environ.get("WALCTL_FAILPOINT", "").startswith("read-wal-scan")  # tests: a writer starts
        try:
            for event in scan:
                if pause:
                    from walctl.failpoints import failpoint

                    failpoint("read-wal-scan")
                if isinstance(event, reader.Finding):
                    # (not the trim record: deleted, its space is the writer's to reuse)
                    hole = hole or event.kind in (reader.HOLE, reader.TORN_TAIL)
                    continue
                b = self._wal_batch(event, uploaded)
                if b is None:
                    continue
                if self.to_offset is not None and b.base_offset >= self.to_offset:
                    return
                if self.next is None:
                    self.next = b.base_offset if self.from_offset is None else self.from_offset
                if b.base_offset > self.next:
                    self._unsettled = self._moved(number, session, hole)
                    if self._unsettled is not None:
                        return  # nothing past the missing range: the next pass serves it first
                    yield self._finding(ReadFinding(GAP, f"stream {self.stream_id}: offsets [{self.next}, "
                                                    f"{b.base_offset}) are neither in the store nor in the WAL",
                                                    self.next, b.base_offset, position=event.offset))
                elif b.base_offset < self.next:
                    continue  # a batch straddling the asked start: served only from its own start
                yield self._record(ReadRecord(b, "wal", wal_offset=event.offset))
                if self._done():
                    return
        finally:
            scan.close()
        yield from self._wal_damage(result, session)

    def _wal_batch(self, event, uploaded: int):
        """The batch of record ``event`` when it is one of the stream's not served yet (after the upload
        mark ``uploaded``, ending past ``next``), else None."""
        if event.offset <= uploaded:
            return None
        b = event.batch
        if b is None or b.stream_id != self.stream_id:
            return None
        if self.next is not None and b.end_offset <= self.next:
            return None
        return b

    def _wal_damage(self, result, session) -> Iterator[ReadFinding]:
        """The scan's corruption findings, unless the header slots changed (the writer's work in
        progress: ``_unsettled`` is set and the next pass reads again)."""
        corrupt = result.corrupt
        if corrupt and not self._done():
            self._unsettled = session.moved()  # damage found after the slots changed: read again
            if self._unsettled is None:
                for f in corrupt:
                    yield self._finding(ReadFinding(WAL_DAMAGE, f"WAL {f.kind} at offset {f.offset}: {f.reason}",
                                                    position=f.offset))

    def _moved(self, number: int, session, hole: bool) -> str | None:
        """Why a range missing from both the store (manifest ``number``) and the WAL may not be a
        gap: a newer manifest, header slots that changed, or blocks in flight (a hole before it
        and a writer holding the lock); None: it is a gap."""
        numbers = mf.manifest_numbers(self.store)
        if numbers and numbers[-1] != number:
            return f"manifest {numbers[-1]} was committed"
        moved = session.moved()
        if moved is not None:
            return moved
        if hole and session.writer_now() is not None:
            return "blocks of the running writer were in flight"
        return None
