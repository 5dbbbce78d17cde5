"""read: a stream's batches back from the store (and the tail still in the WAL), in offset order.

AutoMQ's read path (FORMATS.md 3), object by object:
1. the newest manifest names the live objects whose ranges of the stream cover the asked range;
2. one ranged GET of each object's tail catches its footer and (usually) its whole index; a
   second GET reads the index only when it is larger than the guess;
3. a binary search on (streamId, startOffset) finds the first index entry needed;
4. one ranged GET per run of physically adjacent needed blocks (a run is cut at
   ``run_bytes``), so memory stays bounded by one read, whatever the stream's length;
5. every check that can run does: footer, index crc (walctl version 1), each block against its
   index entry (magic, counts, contiguous offsets of the one stream), and the data crc when the
   reads cover the object's whole data region.
Damage never stops the read: it becomes a finding (with the object key and byte position)
and the read goes on after the damaged range. Gaps and overlaps between objects are findings too.

With a WAL, the stream's records after the last uploaded WAL offset follow (read-only, no lock,
like recover). ``follow`` polls the manifest (and the WAL) with backoff, like ``tail -f``.

The race with a writer, an upload, a trim and compaction (docs/CLI.md "Readers racing a writer").
A record of the stream is, at any moment, in the WAL after its trim point T, or in the store's
newest manifest (upload commits manifest N+1 holding every record up to its mark U, then trims
the WAL to at most U; compaction commits a manifest whose objects hold the same offsets), or both.
One pass reads, in this order:
1. the WAL's header slots: trim point T, end (nextOffset, clean or not) and the lock holder;
2. the manifest list and the newest manifest N, with this WAL's upload mark U_N. N was listed
   after T was read, so it is at least the commit that allowed the trim to T: U_N >= T, and
   every record at or before T is in N's objects;
3. the store's objects of N, from the next offset not served yet;
4. the WAL from T on, serving the records after U_N (the ones at or before it are in N).
A record missing from both is then one that a newer commit moved out of the WAL after step 1
(a trim, and the ring wrapped over it), or a block still in flight (a writer writes up to
--iodepth blocks at once: a later one can land first), or really lost. So before it calls
offsets [a, b) missing, a pass re-checks: a newer manifest than N, header slots that changed
since step 1, or an unfilled hole before the record while a writer holds the lock mean the
pass stops there, serving nothing past a; the next pass (at once, from step 1) serves a
first. Only when none holds is the range a gap (exit 3). The same for damage in the WAL's
tail: found after the header slots changed, it is the writer's work in progress (a start after
a clean close leaves the log longer than the clean nextOffset said), and the next pass reads
the log as it is then. Nothing is skipped: ``next`` only moves past a record served or a
finding. Without ``follow`` a read retries RESCANS times; a WAL that keeps moving ends the read
with an informational ``wal_moved`` finding (not corruption; complete false) at ``next``.

The rooms: this module runs the passes (events, the manifest, the order of the store's objects);
readobject.py reads one object (tail, index, runs, read ahead), readwal.py the WAL's tail, and
readresult.py holds what the read hands back (records, rows, findings, the summary).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Iterator

from walctl.errors import NotFoundError
from walctl.pipeline.readobject import ENTRIES_GUESS, RUN_BYTES, ObjectReading
from walctl.pipeline.readresult import (DAMAGE, GAP, INFORMATIONAL, MISSING, OVERLAP, RECORDED_GAP, TRIMMED,
                                        WAL_DAMAGE, WAL_MOVED, ReadFinding, ReadRecord, ReadRows, ReadSummary,
                                        gap_finding)
from walctl.pipeline.readwal import WalTail
from walctl.store import manifest as mf

if TYPE_CHECKING:
    from walctl.store.base import Store

POLL_S = 0.2  # --follow: first wait between polls of the manifest
MAX_POLL_S = 5.0  # --follow: the backoff doubles the wait up to this while nothing new lands


class StreamReader(ObjectReading, WalTail):
    """Reads one stream back; iterate ``events()`` for ReadRecord and ReadFinding in offset order.

    Args:
        store: the object store (store/ interface).
        stream_id: the stream to read.
        from_offset: the first stream offset wanted (a batch holding it is served whole).
        to_offset: serve batches starting below this offset only.
        limit: stop after this many batches.
        wal: a WAL device or file whose tail (after the last uploaded record) follows the store.
        run_bytes: the largest ranged GET of blocks (one index entry larger than it is one GET).
        payload_views: each batch's payload is a read-only view of the bytes read from the store
            (which it keeps alive), not a copy: for a caller that uses each record and drops it.
        read_ahead: without a limit, read the next run, and the next READ_AHEAD_OBJECTS objects' tails
            and first runs, in a thread while the current run is decoded (memory: four runs at most).
        rows: serve the store's batches as ReadRows (header fields and positions, no payload), several
            per event, for a caller that shows no payload: the same checks and the same summary, with
            no object per batch. Batches of composite objects and of the WAL stay ReadRecords.
    """

    def __init__(self, store: Store, stream_id: int, *, from_offset: int | None = None, to_offset: int | None = None,
                 limit: int | None = None, wal: str | None = None, run_bytes: int = RUN_BYTES,
                 entries_guess: int = ENTRIES_GUESS, read_ahead: bool = True, payload_views: bool = False,
                 rows: bool = False):
        self.store = store
        self.stream_id = stream_id
        self.from_offset = from_offset
        self.to_offset = to_offset
        self.limit = limit
        self.wal = wal
        self.run_bytes = run_bytes
        self.entries_guess = entries_guess
        self.summary = ReadSummary(stream_id, from_offset, to_offset, limit)
        self.next: int | None = from_offset
        self._stats0 = store.stats.snapshot()
        self._manifest_number: int | None = None
        self.read_ahead = read_ahead
        self.payload_views = payload_views
        self.rows = rows
        # With payload views, a store that lends its read buffers (LocalStore: no copy out of the
        # O_DIRECT buffer) reads through them: read_*_view's bytes never change while viewed.
        self._lends = payload_views and store.capabilities.lends_views
        self._read_range = store.read_range_view if self._lends else store.read_range
        self._read_tail = store.read_tail_view if self._lends else store.read_tail
        self._ahead = None  # walctl.device.prefetch.ReadAhead, started at the first read ahead
        self._tails: dict = {}  # object key -> Read of its readobject.Prepared, read ahead
        self._unsettled: str | None = None  # why the last pass stopped early (read again at once)

    # -- public -------------------------------------------------------------------------------

    def events(self, *, follow: bool = False, poll_s: float = POLL_S, max_poll_s: float = MAX_POLL_S,
               idle_timeout_s: float | None = None, sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> Iterator[ReadRecord | ReadFinding]:
        """Yield the stream's batches and findings; with ``follow``, keep polling for new commits.

        Raises:
            NotFoundError: the store has no manifest, or (without WAL or follow) no such stream.
        """
        from walctl.wal.readsession import RESCANS

        first = True
        delay = poll_s
        idle_since = clock()
        retries = 0
        try:
            while True:
                served_before = self.summary.records
                self._unsettled = None
                yield from self._pass(first=first, follow=follow)
                first = False
                if self._unsettled is not None and not self._done():
                    # The WAL or the manifest moved under the pass: read again from the header
                    # slots, at once (a poll's wait: the writer's blocks in flight land meanwhile).
                    self.summary.retries += 1
                    retries = 0 if self.summary.records != served_before else retries + 1
                    if not follow and retries > RESCANS:
                        yield self._finding(ReadFinding(
                            WAL_MOVED, f"the WAL moved under {RESCANS + 1} reads ({self._unsettled}): its "
                            f"records from stream offset {self.next} on were not served; read again, or "
                            "use --follow", self.next))
                        self.summary.log_moved = True
                        return
                    if self.summary.records != served_before:
                        idle_since = clock()
                    delay = poll_s
                    sleep(poll_s)
                    continue
                retries = 0
                if not follow or self._done():
                    return
                if self.summary.records != served_before:
                    delay, idle_since = poll_s, clock()
                elif idle_timeout_s is not None and clock() - idle_since >= idle_timeout_s:
                    return
                else:
                    sleep(delay)
                    delay = min(delay * 2, max_poll_s)
                    continue
                sleep(delay)
        finally:
            self.close()
            self._update_stats()

    # -- one pass -----------------------------------------------------------------------------

    def _done(self) -> bool:
        if self.limit is not None and self.summary.records >= self.limit:
            return True
        return self.to_offset is not None and self.next is not None and self.next >= self.to_offset

    def _update_stats(self) -> None:
        now = self.store.stats.snapshot()
        s = self.summary
        s.gets = now["get"] - self._stats0["get"]
        s.lists = now["list"] - self._stats0["list"]
        s.bytes_read = now["bytes_read"] - self._stats0["bytes_read"]

    def _finding(self, finding: ReadFinding) -> ReadFinding:
        self.summary.findings += 1
        if finding.corrupt:
            self.summary.corrupt_findings += 1
        self.summary.findings_list.append(finding)
        return finding

    def _pass(self, *, first: bool, follow: bool) -> Iterator[ReadRecord | ReadFinding]:
        self.summary.polls += 1
        # The WAL's header slots first, then the manifest (the module's doc says why this order).
        session = self._open_wal() if self.wal is not None else None
        try:
            numbers = mf.manifest_numbers(self.store)
            if not numbers:
                if follow and not first:
                    return
                if not follow:
                    raise NotFoundError("no manifest: not a walctl store, or nothing uploaded yet",
                                        where=self.store.url, hint="check --store; upload creates the first commit")
                return
            number = numbers[-1]
            if number != self._manifest_number:
                key = mf.manifest_key(number)
                doc = mf.parse_manifest(self.store.read_all(key), key)
                self._manifest_number = self.summary.manifest_number = number
                yield from self._store_pass(doc, first=first, follow=follow)
            else:
                doc = None
            if session is not None and not self._done() and self._unsettled is None:
                if doc is None:
                    doc = mf.parse_manifest(self.store.read_all(mf.manifest_key(number)), mf.manifest_key(number))
                yield from self._wal_pass(doc, number, session)
        finally:
            if session is not None:
                session.dev.close()
        self._update_stats()

    def _store_pass(self, doc: mf.Manifest, *, first: bool, follow: bool) -> Iterator[ReadRecord | ReadFinding]:
        """The stream's batches in manifest ``doc``'s live objects from ``next`` on, with the gaps and
        overlaps between them."""
        sid = self.stream_id
        stream = doc.stream(sid)
        if stream is None:
            if first and self.wal is None and not follow:
                raise NotFoundError(f"no stream {sid} in the store", where=self.store.url,
                                    hint="'walctl ls --store URL' lists the streams")
            return
        yield from self._from_start(stream.start)
        ranges = sorted(doc.ranges_of(sid), key=lambda t: (t[0], t[2].id if t[2].order_id is None else t[2].order_id))
        pass_end = None  # end of the previous range of this manifest: ranges must not overlap
        for at, (start, end, o) in enumerate(ranges):
            if self._done():
                return
            overlaps = pass_end is not None and start < pass_end
            pass_end = end if pass_end is None else max(pass_end, end)
            if end <= self.next:
                if overlaps:
                    yield self._finding(ReadFinding(OVERLAP, f"stream {sid}: object {o.id} holds [{start}, "
                                                    f"{end}), offsets another live object holds too", start, end,
                                                    o.id, o.key))
                continue  # read already (in an earlier poll, or from the object it overlaps)
            if self.to_offset is not None and start >= self.to_offset:
                break
            yield from self._before_object(doc, o, start, end, overlaps)
            yield from self._read_object(o, end, self._later(ranges, at, end))
            if self._unsettled is not None:
                return  # a newer manifest replaced an object under this pass: the next pass reads it
        if not self._done():
            yield from self._end_gap(stream.end)

    def _from_start(self, start: int) -> Iterator[ReadFinding]:
        """Start at the stream's start (``start``) when no offset was asked; asked below it, the
        offsets below are TRIMMED."""
        if self.next is None:
            self.next = start
        elif self.next < start:
            yield self._finding(ReadFinding(TRIMMED, f"offsets [{self.next}, {start}) are below the "
                                            f"stream's start (deleted by retention or compaction)",
                                            self.next, start))
            self.next = start

    def _before_object(self, doc: mf.Manifest, o: mf.LiveObject, start: int, end: int,
                       overlaps: bool) -> Iterator[ReadFinding]:
        """Before object ``o`` (its range [start, end)): the gap from ``next`` to it, or its overlap."""
        sid = self.stream_id
        if start > self.next:
            yield self._finding(gap_finding(doc, sid, self.next, start))
            self.next = start
        elif overlaps:
            # Ranges of one manifest overlap; an object replacing earlier ones in a later poll
            # (compaction) starts below self.next legitimately and is read from self.next on.
            yield self._finding(ReadFinding(OVERLAP, f"stream {sid}: object {o.id} holds [{start}, {end}), "
                                            f"overlapping offsets another live object holds", start,
                                            min(end, self.next), o.id, o.key))

    def _end_gap(self, end: int) -> Iterator[ReadFinding]:
        """The offsets from ``next`` to the stream's end (``end``, or to_offset) that no object held."""
        stop = end if self.to_offset is None else min(end, self.to_offset)
        if self.next < stop:
            yield self._finding(ReadFinding(GAP, f"stream {self.stream_id}: the manifest says the stream ends at "
                                            f"{end}, but no live object holds [{self.next}, {stop})", self.next,
                                            stop))
            self.next = stop


def open_for_read(url: str, endpoint_url: str | None = None, *, s3=None):
    """Open a store without creating anything: a mistyped URL is UsageError (exit 2), a missing local
    directory NotFoundError (exit 4). ``s3``: open_store's S3 settings (retry budget, timeouts)."""
    from walctl.store import open_store

    return open_store(url, endpoint_url=endpoint_url, create=False, s3=s3)  # a reader never creates a store


def read_stream(store: Store, stream_id: int, **kwargs) -> tuple[list[ReadRecord | ReadFinding], ReadSummary]:
    """Convenience for tests and scripts: the whole read as a list (memory grows with it)."""
    follow_keys = ("follow", "poll_s", "max_poll_s", "idle_timeout_s", "sleep", "clock")
    follow_args = {k: kwargs.pop(k) for k in follow_keys if k in kwargs}
    reader = StreamReader(store, stream_id, **kwargs)
    events = list(reader.events(**follow_args))
    return events, reader.summary


__all__ = ["DAMAGE", "ENTRIES_GUESS", "GAP", "INFORMATIONAL", "MISSING", "OVERLAP", "RECORDED_GAP", "RUN_BYTES",
           "TRIMMED", "WAL_DAMAGE", "WAL_MOVED", "ReadFinding", "ReadRecord", "ReadRows", "ReadSummary",
           "StreamReader", "open_for_read", "read_stream"]
