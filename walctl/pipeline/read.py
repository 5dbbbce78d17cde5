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
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

from walctl.errors import FormatError, NotFoundError
from walctl.format import object as obj
from walctl.format.batch import StreamRecordBatch
from walctl.format.crc import crc32c
from walctl.store import manifest as mf

if TYPE_CHECKING:
    from walctl.store.base import Store

RUN_BYTES = 16 << 20  # one ranged GET reads at most this much (unless one index entry is larger)
ENTRIES_GUESS = obj.DEFAULT_ENTRIES_GUESS  # the first tail GET catches an index of this many entries
# Without a limit, the tails (and first runs) of this many objects after the one being served are
# read ahead, so the read-ahead threads always have the next read queued: with one object ahead, the
# reading thread idled while the main thread woke up to queue the next (40% of its time, loaded).
READ_AHEAD_OBJECTS = 2
# Reads ahead run on this many threads: two reads in flight read a local store 10-40% faster than
# one after the other (the device's queue holds the next read while one completes); same reads.
READ_AHEAD_THREADS = 2
POLL_S = 0.2  # --follow: first wait between polls of the manifest
MAX_POLL_S = 5.0  # --follow: the backoff doubles the wait up to this while nothing new lands

# Finding kinds. Every one but the INFORMATIONAL ones means the store does not hold what it says: exit 3.
GAP = "gap"  # offsets the manifest or an object should hold, held by none
OVERLAP = "overlap"  # two objects (or an object and the WAL) both claim offsets
DAMAGE = "damage"  # a check of an object's bytes failed
MISSING = "missing_object"  # the manifest names an object the store does not have
WAL_DAMAGE = "wal_damage"  # the WAL tail has damage a crash does not explain
TRIMMED = "trimmed"  # asked for offsets below the stream's start (deleted by retention): informational
WAL_MOVED = "wal_moved"  # (no --follow) the WAL kept moving under every retry: its tail was not served
# offsets no object holds because an upload recorded them lost (the manifest's stream_gaps: a crash,
# an --accept-gap, a salvage past damage): a known loss, said with its cause, not damage
RECORDED_GAP = "recorded_gap"
INFORMATIONAL = (TRIMMED, WAL_MOVED, RECORDED_GAP)


@dataclass(frozen=True)
class ReadRecord:
    """One batch read back, and where it came from."""

    batch: StreamRecordBatch
    source: str  # "store" or "wal"
    object_id: int | None = None
    key: str | None = None
    block_position: int | None = None  # object position of the DataBlock holding the batch
    batch_position: int | None = None  # object position of the batch itself
    wal_offset: int | None = None  # logical WAL offset of the record (source "wal")


@dataclass(frozen=True)
class ReadRows:
    """Batches of one object served without their payloads (``StreamReader(rows=True)``), in offset
    order: each row is ``(stream_id, base_offset, end_offset, count, epoch, payload_bytes,
    block_position, batch_position)``, what a ReadRecord of source "store" says but its payload."""

    object_id: int
    key: str
    rows: list


def _gap_finding(doc, sid: int, lo: int, hi: int) -> "ReadFinding":
    """Offsets [lo, hi) of stream ``sid`` held by no live object: a recorded gap when the manifest's
    stream_gaps cover them (informational, with the recorded cause), else a GAP (damage)."""
    for gap in doc.stream_gaps or ():
        if gap.get("stream_id") == sid and gap.get("from", hi) <= lo and hi <= gap.get("to", lo):
            return ReadFinding(RECORDED_GAP, f"stream {sid}: offsets [{lo}, {hi}) were recorded lost by an upload "
                                             f"(cause {gap.get('cause')}; the manifest's stream_gaps)", lo, hi)
    return ReadFinding(GAP, f"stream {sid}: offsets [{lo}, {hi}) are in no live object", lo, hi)


@dataclass
class ReadFinding:
    """Something the read could not serve as the manifest promised, or found damaged."""

    kind: str
    message: str
    start_offset: int | None = None  # stream offsets [start, end) affected, when known
    end_offset: int | None = None
    object_id: int | None = None
    key: str | None = None
    position: int | None = None  # byte position in the object (or WAL offset for wal_damage)

    @property
    def corrupt(self) -> bool:
        return self.kind not in INFORMATIONAL

    def to_json(self) -> dict:
        return {"type": "finding", "kind": self.kind, "message": self.message, "start_offset": self.start_offset,
                "end_offset": self.end_offset, "object_id": self.object_id, "key": self.key,
                "position": self.position, "corrupt": self.corrupt}


@dataclass
class ReadSummary:
    """What a read did: records served, requests made, findings."""

    stream_id: int
    from_offset: int | None
    to_offset: int | None
    limit: int | None
    records: int = 0
    payload_bytes: int = 0
    wal_records: int = 0
    objects: int = 0  # objects whose tail (footer + index) was read
    gets: int = 0  # every GET of the store (manifest, tails, indexes, block runs), retries included
    block_gets: int = 0  # of which GETs of DataBlock runs
    lists: int = 0
    bytes_read: int = 0
    findings: int = 0
    corrupt_findings: int = 0
    next_offset: int | None = None  # the stream offset right after the last batch served
    manifest_number: int | None = None
    polls: int = 0
    limited: bool = False
    retries: int = 0  # passes cut short and read again because the WAL or the manifest moved under them
    log_moved: bool = False  # (no --follow) the WAL kept moving: its tail from next_offset on was not served
    findings_list: list = field(default_factory=list, repr=False)

    def to_json(self) -> dict:
        return {"type": "summary", "stream_id": self.stream_id, "from_offset": self.from_offset,
                "to_offset": self.to_offset, "limit": self.limit, "records": self.records,
                "payload_bytes": self.payload_bytes, "wal_records": self.wal_records, "objects": self.objects,
                "gets": self.gets, "block_gets": self.block_gets, "lists": self.lists,
                "bytes_read": self.bytes_read, "findings": self.findings,
                "corrupt_findings": self.corrupt_findings, "next_offset": self.next_offset,
                "manifest_number": self.manifest_number, "polls": self.polls, "retries": self.retries,
                "log_moved": self.log_moved,
                "complete": not self.limited and self.corrupt_findings == 0 and not self.log_moved}


class StreamReader:
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
        self._pool = None
        self._tails: dict = {}  # object key -> future of its tail, read ahead
        self._unsettled: str | None = None  # why the last pass stopped early (read again at once)

    # -- public -------------------------------------------------------------------------------

    def events(self, *, follow: bool = False, poll_s: float = POLL_S, max_poll_s: float = MAX_POLL_S,
               idle_timeout_s: float | None = None, sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> Iterator[ReadRecord | ReadFinding]:
        """Yield the stream's batches and findings; with ``follow``, keep polling for new commits.

        Raises:
            NotFoundError: the store has no manifest, or (without WAL or follow) no such stream.
        """
        from walctl.wal.lifecycle import RESCANS

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
            if session is not None and not self._done():
                if doc is None:
                    doc = mf.parse_manifest(self.store.read_all(mf.manifest_key(number)), mf.manifest_key(number))
                yield from self._wal_pass(doc, number, session)
        finally:
            if session is not None:
                session.dev.close()
        self._update_stats()

    def _open_wal(self):
        from walctl.wal.lifecycle import open_reader

        return open_reader(self.wal)

    def _store_pass(self, doc: mf.Manifest, *, first: bool, follow: bool) -> Iterator[ReadRecord | ReadFinding]:
        sid = self.stream_id
        stream = doc.stream(sid)
        if stream is None:
            if first and self.wal is None and not follow:
                raise NotFoundError(f"no stream {sid} in the store", where=self.store.url,
                                    hint="'walctl ls --store URL' lists the streams")
            return
        if self.next is None:
            self.next = stream.start
        elif self.next < stream.start:
            yield self._finding(ReadFinding(TRIMMED, f"offsets [{self.next}, {stream.start}) are below the "
                                            f"stream's start (deleted by retention or compaction)",
                                            self.next, stream.start))
            self.next = stream.start
        ranges = sorted(doc.ranges_of(sid), key=lambda t: (t[0], t[2].get("order_id", t[2]["id"])))
        pass_end = None  # end of the previous range of this manifest: ranges must not overlap
        for at, (start, end, o) in enumerate(ranges):
            if self._done():
                return
            overlaps = pass_end is not None and start < pass_end
            pass_end = end if pass_end is None else max(pass_end, end)
            if end <= self.next:
                if overlaps:
                    yield self._finding(ReadFinding(OVERLAP, f"stream {sid}: object {o['id']} holds [{start}, "
                                                    f"{end}), offsets another live object holds too", start, end,
                                                    o["id"], o["key"]))
                continue  # read already (in an earlier poll, or from the object it overlaps)
            if self.to_offset is not None and start >= self.to_offset:
                break
            if start > self.next:
                yield self._finding(_gap_finding(doc, sid, self.next, start))
                self.next = start
            elif overlaps:
                # Ranges of one manifest overlap; an object replacing earlier ones in a later poll
                # (compaction) starts below self.next legitimately and is read from self.next on.
                yield self._finding(ReadFinding(OVERLAP, f"stream {sid}: object {o['id']} holds [{start}, {end}), "
                                                f"overlapping offsets another live object holds", start,
                                                min(end, self.next), o["id"], o["key"]))
            later = self._later(ranges, at, end)
            yield from self._read_object(o, end, later)
        if self._done():
            return
        end = stream.end
        stop = end if self.to_offset is None else min(end, self.to_offset)
        if self.next < stop:
            yield self._finding(ReadFinding(GAP, f"stream {sid}: the manifest says the stream ends at {end}, but "
                                            f"no live object holds [{self.next}, {stop})", self.next, stop))
            self.next = stop

    # -- one object ---------------------------------------------------------------------------

    def _prefetching(self) -> bool:
        """Read ahead (the next run, the next object's tail) only when every read ahead is needed:
        without a limit, which could end the read before them."""
        return self.limit is None and self.read_ahead

    def _submit(self, fn, *args):
        """Run a store read in a read-ahead thread: I/O (and boto3's HTTP) overlaps decoding."""
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=READ_AHEAD_THREADS, thread_name_prefix="walctl-read-ahead")
        return self._pool.submit(fn, *args)

    def _whole(self, o: dict, start_offset: int) -> bool:
        """Read the whole object in one GET instead of its tail then its blocks: when (nearly) all of it
        is wanted (no limit; the stream's blocks are >= 90% of it and wanted from their start to their
        end) and it fits one run. Halves the GETs of a stream kept in Stream Objects."""
        size = o.get("size")
        if self.limit is not None or size is None or size > self.run_bytes:
            return False
        r = next((r for r in o["ranges"] if r["stream_id"] == self.stream_id), None)
        return (r is not None and 10 * r["bytes"] >= 9 * size and start_offset <= r["start"]
                and (self.to_offset is None or self.to_offset >= r["end"]))

    def _later(self, ranges: list, at: int, end: int) -> list[tuple[dict, int]]:
        """The objects probably read after ``ranges[at]`` (which ends at ``end``), and the offsets they
        start at, in reading order: the next READ_AHEAD_OBJECTS whose tails are read ahead. (No range
        before ``at`` ends after ``end``: it would have been read past ``end`` already.)"""
        later: list[tuple[dict, int]] = []
        if not self._prefetching():
            return later
        o = ranges[at][2]
        for j in range(at + 1, len(ranges)):
            s2, e2, other = ranges[j]
            if e2 > end and other is not o and (self.to_offset is None or s2 < self.to_offset) \
                    and all(other is not seen for seen, _ in later):
                later.append((other, s2))
                if len(later) == READ_AHEAD_OBJECTS:
                    break
        return later

    def _tail_of(self, o: dict, start_offset: int):
        length = obj.tail_length_hint(self.entries_guess, o.get("size"))
        if self._whole(o, start_offset):
            length = o["size"]
        return self._read_tail(o["key"], length)

    def _prefetch(self, o: dict, start_offset: int):
        """Read ahead for an object not yet reached: its tail and, when the tail holds the whole index,
        the first run of blocks from ``start_offset``. Returns (tail, size, (start, end) | None, data,
        crc): data None when the tail holds the run; crc the run's CRC-32C when it starts the data
        region of a checksummed object (computed here, beside the main thread's decoding), else None."""
        tail, size = self._tail_of(o, start_offset)
        if obj.is_composite(tail):
            return tail, size, None, None, None
        footer, entries = obj.parse_tail(tail, size)
        wanted = self._wanted(entries, start_offset) if entries is not None else []
        if not wanted:
            return tail, size, None, None, None
        run = self._next_run(wanted, 0)
        start, end = run[0].block_position, run[-1].block_end
        tail_position = size - len(tail)
        if start >= tail_position:
            data, held = memoryview(tail)[start - tail_position:end - tail_position], None  # in the tail
        else:
            data = held = self._read_range(o["key"], start, end)
        crc = crc32c(data) if footer.checksummed and start == 0 and len(data) == end else None
        return tail, size, (start, end), held, crc

    def _wanted(self, entries, start_offset: int) -> list:
        wanted = obj.find_entries(entries, self.stream_id, start_offset)
        if self.to_offset is not None:
            wanted = [e for e in wanted if e.start_offset < self.to_offset]
        return wanted

    def close(self) -> None:
        """Stop the read-ahead threads (reads in flight finish; their results are dropped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._tails.clear()

    def _read_object(self, o: dict, range_end: int,
                     later: list[tuple[dict, int]] = ()) -> Iterator[ReadRecord | ReadFinding]:
        """Serve the stream's batches of object ``o`` from ``self.next`` on; ``later``: the objects
        probably read next and the offsets they start at, read ahead (tail, first run) meanwhile."""
        key, oid = o["key"], o["id"]
        store = self.store

        def damage(message: str, position: int | None, upto: int) -> ReadFinding:
            f = ReadFinding(DAMAGE, message, self.next, upto, oid, key, position)
            self.next = max(self.next, upto)
            return self._finding(f)

        ahead = self._tails.pop(key, None)
        prepared = None
        try:
            if ahead is not None:
                try:
                    prepared = ahead.result()
                except NotFoundError:
                    raise
                except Exception:  # noqa: BLE001 - read again below, where the error becomes a finding
                    prepared = None
            tail, size = prepared[:2] if prepared is not None else self._tail_of(o, self.next)
        except NotFoundError:
            f = ReadFinding(MISSING, f"object {oid} is live in the manifest but missing from the store",
                            self.next, range_end, oid, key)
            self.next = range_end
            yield self._finding(f)
            return
        self.summary.objects += 1
        if obj.is_composite(tail):
            yield from self._read_composite(o, tail, size, range_end)
            return
        try:
            footer, entries = obj.parse_tail(tail, size)
            if entries is None:
                index = store.read_range(key, footer.index_start_position,
                                         footer.index_start_position + footer.index_block_length)
                entries = obj.decode_index(index, footer, base_position=footer.index_start_position)
        except FormatError as exc:
            yield damage(f"footer or index: {exc.what}; offsets up to {range_end} unreadable", exc.offset, range_end)
            return
        if o.get("size") is not None and size != o["size"]:
            yield damage(f"object is {size} bytes, the manifest says {o['size']}", None, range_end)
            return
        wanted = self._wanted(entries, self.next)
        for other, start in later:
            if other["key"] not in self._tails and self._prefetching():
                self._tails[other["key"]] = self._submit(self._prefetch, other, start)
        i = 0
        crc, covered, checked = 0, 0, False  # running data crc over runs that cover [0, covered) without a hole
        pending = None  # (run, future) read ahead
        tail_position = size - len(tail)  # blocks from here on are in the tail already: no GET
        while i < len(wanted) and not self._done():
            run_crc = None  # the run's CRC-32C from 0, when the read-ahead thread computed it
            if pending is not None:
                run, future = pending
                data = future.result()
            else:
                run = self._next_run(wanted, i)
                span = (run[0].block_position, run[-1].block_end)
                if i == 0 and prepared is not None and prepared[2] == span:
                    run_crc = prepared[4]
                if span[0] >= tail_position:
                    data = memoryview(tail)[span[0] - tail_position:span[1] - tail_position]
                elif i == 0 and prepared is not None and prepared[2] == span:
                    data = prepared[3]  # read ahead while the previous object was served
                    self.summary.block_gets += 1
                else:
                    data = self._read_range(key, *span)
                    self.summary.block_gets += 1
            i += len(run)
            pending = None
            if i < len(wanted) and self._prefetching() and wanted[i].block_position < tail_position:
                follow_run = self._next_run(wanted, i)
                pending = (follow_run, self._submit(self._read_range, key, follow_run[0].block_position,
                                                    follow_run[-1].block_end))
                self.summary.block_gets += 1
            run_start, run_end = run[0].block_position, run[-1].block_end
            if len(data) != run_end - run_start:
                yield damage(f"object ends at {run_start + len(data)}, inside blocks [{run_start}, {run_end})",
                             run_start + len(data), range_end)
                return
            if footer.checksummed and covered == run_start:
                crc, covered = run_crc if run_crc is not None and covered == 0 else crc32c(data, crc), run_end
                if covered == footer.index_start_position and not checked:
                    checked = True
                    if crc != footer.data_crc:
                        # Said before serving this run: with one run, before anything of the object.
                        yield self._finding(ReadFinding(
                            DAMAGE, f"data crc mismatch over [0, {covered}) (expected 0x{footer.data_crc:08X}, "
                            f"found 0x{crc:08X}): a byte of this object changed; its batches passed their "
                            "structure checks, 'walctl inspect-object --deep' narrows it to the block",
                            run[0].start_offset, run[-1].end_offset, oid, key, 0))
            for entry in run:
                yield from self._serve_entry(data, run_start, entry, oid, key)
                if self._done():
                    return

    def _read_composite(self, o: dict, tail: bytes, size: int, range_end: int) -> Iterator[ReadRecord | ReadFinding]:
        """An AutoMQ composite object: its index points into member objects; read their blocks there."""
        from walctl.store.inspect import member_key  # (inspect-object's: a plain object's read does not load it)

        key, oid = o["key"], o["id"]
        try:
            whole = tail if len(tail) == size else self.store.read_range(key, 0, size)
            comp = obj.decode_composite(whole, size)
        except FormatError as exc:
            f = ReadFinding(DAMAGE, f"composite object: {exc.what}; offsets up to {range_end} unreadable",
                            self.next, range_end, oid, key, exc.offset)
            self.next = max(self.next, range_end)
            yield self._finding(f)
            return
        for member in comp.members:
            entries = [e for e in comp.entries[member.block_start_index:member.block_end_index]
                       if e.stream_id == self.stream_id and e.end_offset > self.next
                       and (self.to_offset is None or e.start_offset < self.to_offset)]
            mkey = member_key(key, member.object_id)
            i = 0
            while i < len(entries) and not self._done():
                run = self._next_run(entries, i)
                i += len(run)
                try:
                    data = self.store.read_range(mkey, run[0].block_position, run[-1].block_end)
                except NotFoundError:
                    f = ReadFinding(MISSING, f"member object {member.object_id} of composite object {oid} is "
                                    "missing from the store", self.next, run[-1].end_offset, member.object_id, mkey)
                    self.next = max(self.next, run[-1].end_offset)
                    yield self._finding(f)
                    continue
                self.summary.block_gets += 1
                if len(data) != run[-1].block_end - run[0].block_position:
                    f = ReadFinding(DAMAGE, f"member object ends inside blocks [{run[0].block_position}, "
                                    f"{run[-1].block_end})", self.next, run[-1].end_offset, member.object_id, mkey,
                                    run[0].block_position + len(data))
                    self.next = max(self.next, run[-1].end_offset)
                    yield self._finding(f)
                    continue
                for entry in run:
                    yield from self._serve_entry(data, run[0].block_position, entry, member.object_id, mkey)
                    if self._done():
                        return

    def _next_run(self, wanted: list, i: int) -> list:
        """Entries from ``wanted[i]`` that one GET reads: physically adjacent, within run_bytes, and
        (with a limit) no more than the batches still to serve."""
        run = [wanted[i]]
        size = wanted[i].block_size
        batches = wanted[i].record_count
        left = None if self.limit is None else self.limit - self.summary.records
        for entry in wanted[i + 1:]:
            if entry.block_position != run[-1].block_end or size + entry.block_size > self.run_bytes:
                break
            if left is not None and batches >= left:
                break
            run.append(entry)
            size += entry.block_size
            batches += entry.record_count
        return run

    def _serve_entry(self, data, base: int, entry, oid: int, key: str) -> Iterator[ReadRecord | ReadFinding]:
        if self.rows:
            rows = obj.entry_rows(data, entry, base_position=base)
            if rows is not None:
                yield from self._serve_rows(rows, oid, key)
                return
            # A check failed: the batches one by one, which finds the same failure and words it.
        try:
            # Views only of bytes (immutable) or of a buffer the store lent (never changed while viewed);
            # another buffer gets copies.
            views = self.payload_views and (self._lends or isinstance(
                data.obj if isinstance(data, memoryview) else data, bytes))
            for placed in obj.iter_placed(data, entry, base_position=base, copy=not views):
                b = placed.batch
                if b.end_offset <= self.next:
                    continue
                if self.to_offset is not None and b.base_offset >= self.to_offset:
                    self.next = max(self.next, self.to_offset)
                    return
                if b.base_offset > self.next:
                    yield self._finding(ReadFinding(GAP, f"stream {self.stream_id}: offsets [{self.next}, "
                                                    f"{b.base_offset}) missing inside object {oid}", self.next,
                                                    b.base_offset, oid, key, placed.batch_position))
                yield self._record(ReadRecord(b, "store", oid, key, placed.block_position, placed.batch_position))
                if self._done():
                    return
        except FormatError as exc:
            yield self._finding(ReadFinding(
                DAMAGE, f"{exc.what}; offsets [{self.next}, {entry.end_offset}) of this index entry unreadable",
                self.next, entry.end_offset, oid, key, exc.offset))
            self.next = max(self.next, entry.end_offset)

    def _serve_rows(self, rows: list, oid: int, key: str) -> Iterator[ReadRows | ReadFinding]:
        """_serve_entry's loop on checked rows (entry_rows): the same skips, stops, gaps and summary."""
        nxt, to = self.next, self.to_offset
        left = None if self.limit is None else self.limit - self.summary.records  # batches still to serve
        out: list = []
        for row in rows:
            if row[2] <= nxt:
                continue
            if to is not None and row[1] >= to:
                nxt = max(nxt, to)
                break
            if row[1] > nxt:
                if out:
                    yield self._rows(out, oid, key)
                    out = []
                yield self._finding(ReadFinding(GAP, f"stream {self.stream_id}: offsets [{nxt}, {row[1]}) missing "
                                                f"inside object {oid}", nxt, row[1], oid, key, row[7]))
            out.append(row)
            nxt = row[2]
            if left is not None:
                left -= 1
                if left <= 0:
                    break
            if to is not None and nxt >= to:
                break
        if out:
            yield self._rows(out, oid, key)
        self.next = nxt

    def _rows(self, out: list, oid: int, key: str) -> ReadRows:
        """Count ``out`` (rows served) as _record counts records."""
        s = self.summary
        s.records += len(out)
        s.payload_bytes += sum(row[5] for row in out)
        self.next = s.next_offset = out[-1][2]
        if self.limit is not None and s.records >= self.limit:
            s.limited = True
        return ReadRows(oid, key, out)

    def _record(self, record: ReadRecord) -> ReadRecord:
        s = self.summary
        s.records += 1
        s.payload_bytes += len(record.batch.payload)
        if record.source == "wal":
            s.wal_records += 1
        self.next = record.batch.end_offset
        s.next_offset = self.next
        if self.limit is not None and s.records >= self.limit:
            s.limited = True
        return record

    # -- the WAL's tail -----------------------------------------------------------------------

    def _wal_pass(self, doc: mf.Manifest, number: int, session) -> Iterator[ReadRecord | ReadFinding]:
        """The stream's records in the WAL after its last uploaded record (read-only, no lock), from
        the header slots ``session`` read before manifest ``number`` (``doc``) was listed. Stops
        early, setting ``_unsettled``, where the WAL or the manifest moved under it."""
        from walctl.wal import reader

        header = session.state.header
        mark = doc.upload_mark(header.node_id)
        uploaded = mark["offset"] if mark else -1
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
                if event.offset <= uploaded:
                    continue
                b = event.batch
                if b is None or b.stream_id != self.stream_id:
                    continue
                if self.next is not None and b.end_offset <= self.next:
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


__all__ = ["ReadFinding", "ReadRecord", "ReadRows", "ReadSummary", "StreamReader", "open_for_read", "read_stream"]
