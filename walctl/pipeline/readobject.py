"""``walctl read``'s object reading: one object's tail, index and runs of blocks, read ahead.

The part of StreamReader (walctl.pipeline.read) that reads one object of the store (FORMATS.md 3,
steps 2-5 of the module doc of walctl.pipeline.read): its tail (footer and usually the whole
index) in one ranged GET, the index entries from the asked offset on, one GET per run of
adjacent blocks, each batch checked against its entry, and the data crc once the runs cover
the object's data region. Reads ahead go through walctl.device.prefetch.ReadAhead: the next
run of this object, and the tails (and first runs) of the next objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, NamedTuple

from walctl.errors import FormatError, NotFoundError
from walctl.format import object as obj
from walctl.format.crc import crc32c
from walctl.pipeline.readresult import DAMAGE, GAP, MISSING, ReadFinding, ReadRecord, ReadRows

if TYPE_CHECKING:
    from walctl.device.prefetch import ReadAhead
    from walctl.store.manifest import LiveObject

RUN_BYTES = 16 << 20  # one ranged GET reads at most this much (unless one index entry is larger)
ENTRIES_GUESS = obj.DEFAULT_ENTRIES_GUESS  # the first tail GET catches an index of this many entries
# Without a limit, the tails (and first runs) of this many objects after the one being served are
# read ahead, so the read-ahead threads always have the next read queued: with one object ahead, the
# reading thread idled while the main thread woke up to queue the next (40% of its time, loaded).
READ_AHEAD_OBJECTS = 2
# Reads ahead run on this many threads: two reads in flight read a local store 10-40% faster than
# one after the other (the device's queue holds the next read while one completes); same reads.
READ_AHEAD_THREADS = 2


class Prepared(NamedTuple):
    """What a read-ahead thread prepared for an object not yet reached (ObjectReading._prefetch)."""

    tail: bytes  # the object's tail (or, read whole, the object)
    size: int  # the object's size
    span: tuple[int, int] | None  # object positions [start, end) of its first run, when prepared
    data: object  # the first run's bytes, None when the tail holds them
    crc: int | None  # the run's CRC-32C when it starts the data region of a checksummed object


class _Tail(NamedTuple):
    """An object's tail as read, and its footer."""

    data: object
    size: int
    footer: object

    @property
    def position(self) -> int:
        """Object position of the tail's first byte: blocks from here on need no GET."""
        return self.size - len(self.data)


class _DataCrc:
    """The running CRC-32C of an object's data region over the runs read from position 0 without a
    hole, checked against the footer's once they cover the whole region."""

    __slots__ = ("footer", "crc", "covered", "checked")

    def __init__(self, footer):
        self.footer, self.crc, self.covered, self.checked = footer, 0, 0, False

    def add(self, data, run_start: int, run_end: int, run_crc: int | None) -> bool:
        """Extend over the run [run_start, run_end) (``run_crc``: its CRC from 0, when computed
        already); True when the region is now covered and its crc is not the footer's."""
        footer = self.footer
        if not footer.checksummed or self.covered != run_start:
            return False
        self.crc = run_crc if run_crc is not None and self.covered == 0 else crc32c(data, self.crc)
        self.covered = run_end
        if self.covered == footer.index_start_position and not self.checked:
            self.checked = True
            return self.crc != footer.data_crc
        return False


class ObjectReading:
    """StreamReader's reading of the store's objects (a mixin: the reader's state is its own)."""

    _ahead: ReadAhead | None = None
    _tails: dict  # object key -> Read of its Prepared, read ahead

    # -- one object ---------------------------------------------------------------------------

    def _prefetching(self) -> bool:
        """Read ahead (the next run, the next object's tail) only when every read ahead is needed:
        without a limit, which could end the read before them."""
        return self.limit is None and self.read_ahead

    def _submit(self, fn, *args):
        """Run a store read in a read-ahead thread: I/O (and boto3's HTTP) overlaps decoding."""
        if self._ahead is None:
            from walctl.device.prefetch import ReadAhead

            self._ahead = ReadAhead(READ_AHEAD_THREADS, name="walctl-read-ahead")
        return self._ahead.submit(fn, *args)

    def _whole(self, o: LiveObject, start_offset: int) -> bool:
        """Read the whole object in one GET instead of its tail then its blocks: when (nearly) all of it
        is wanted (no limit; the stream's blocks are >= 90% of it and wanted from their start to their
        end) and it fits one run. Halves the GETs of a stream kept in Stream Objects."""
        size = o.size
        if self.limit is not None or size > self.run_bytes:
            return False
        r = next((r for r in o.ranges if r.stream_id == self.stream_id), None)
        return (r is not None and 10 * r.bytes >= 9 * size and start_offset <= r.start
                and (self.to_offset is None or self.to_offset >= r.end))

    def _later(self, ranges: list, at: int, end: int) -> list[tuple[LiveObject, int]]:
        """The objects probably read after ``ranges[at]`` (which ends at ``end``), and the offsets they
        start at, in reading order: the next READ_AHEAD_OBJECTS whose tails are read ahead. (No range
        before ``at`` ends after ``end``: it would have been read past ``end`` already.)"""
        later: list[tuple[LiveObject, int]] = []
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

    def _tail_of(self, o: LiveObject, start_offset: int):
        length = obj.tail_length_hint(self.entries_guess, o.size)
        if self._whole(o, start_offset):
            length = o.size
        return self._read_tail(o.key, length)

    def _prefetch(self, o: LiveObject, start_offset: int) -> Prepared:
        """Read ahead for an object not yet reached: its tail and, when the tail holds the whole index,
        the first run of blocks from ``start_offset`` (Prepared: its crc computed here, beside the main
        thread's decoding)."""
        tail, size = self._tail_of(o, start_offset)
        if obj.is_composite(tail):
            return Prepared(tail, size, None, None, None)
        footer, entries = obj.parse_tail(tail, size)
        wanted = self._wanted(entries, start_offset) if entries is not None else []
        if not wanted:
            return Prepared(tail, size, None, None, None)
        run = self._next_run(wanted, 0)
        start, end = run[0].block_position, run[-1].block_end
        tail_position = size - len(tail)
        if start >= tail_position:
            data, held = memoryview(tail)[start - tail_position:end - tail_position], None  # in the tail
        else:
            data = held = self._read_range(o.key, start, end)
        crc = crc32c(data) if footer.checksummed and start == 0 and len(data) == end else None
        return Prepared(tail, size, (start, end), held, crc)

    def _wanted(self, entries, start_offset: int) -> list:
        wanted = obj.find_entries(entries, self.stream_id, start_offset)
        if self.to_offset is not None:
            wanted = [e for e in wanted if e.start_offset < self.to_offset]
        return wanted

    def close(self) -> None:
        """Stop the read-ahead threads (reads in flight finish; their results are dropped)."""
        if self._ahead is not None:
            self._ahead.close()
            self._ahead = None
        self._tails.clear()

    def _taken_ahead(self, key: str) -> Prepared | None:
        """What a read-ahead thread prepared for object ``key`` (None when nothing was, or its read
        failed: it is read again here, where the error becomes a finding; NotFoundError raised)."""
        ahead = self._tails.pop(key, None)
        if ahead is None:
            return None
        try:
            return ahead.result()
        except NotFoundError:
            raise
        except Exception:  # noqa: BLE001 - read again by the caller, where the error becomes a finding
            return None

    def _read_object(self, o: LiveObject, range_end: int,
                     later: list[tuple[LiveObject, int]] = ()) -> Iterator[ReadRecord | ReadFinding]:
        """Serve the stream's batches of object ``o`` from ``self.next`` on; ``later``: the objects
        probably read next and the offsets they start at, read ahead (tail, first run) meanwhile.

        An object gone from the store is a ``missing_object`` finding only while the manifest this
        pass read is still the newest: after a newer commit, compaction may have replaced it and gc
        deleted it (past its grace) while this pass read, so the pass stops, unsettled, and the
        next one reads the newer manifest from ``self.next`` on."""
        try:
            yield from self._object_batches(o, range_end, later)
        except NotFoundError:
            moved = self._manifest_moved()
            if moved is not None:
                self._unsettled = f"object {o.id} is gone and {moved}"
                return
            f = ReadFinding(MISSING, f"object {o.id} is live in the manifest but missing from the store",
                            self.next, range_end, o.id, o.key)
            self.next = max(self.next, range_end)
            yield self._finding(f)

    def _manifest_moved(self) -> str | None:
        """Why the manifest this pass read may no longer say what is live (None: it still does)."""
        from walctl.store import manifest as mf

        numbers = mf.manifest_numbers(self.store)
        if numbers and numbers[-1] != self._manifest_number:
            return f"manifest {numbers[-1]} was committed"
        return None

    def _object_batches(self, o: LiveObject, range_end: int,
                        later: list[tuple[LiveObject, int]]) -> Iterator[ReadRecord | ReadFinding]:
        """_read_object's work; NotFoundError raised (the object, or its index, is gone)."""
        key = o.key
        prepared = self._taken_ahead(key)
        tail, size = (prepared.tail, prepared.size) if prepared is not None else self._tail_of(o, self.next)
        self.summary.objects += 1
        if obj.is_composite(tail):
            yield from self._read_composite(o, tail, size, range_end)
            return
        try:
            footer, entries = self._index_of(key, tail, size)
        except FormatError as exc:
            yield self._damage(o, f"footer or index: {exc.what}; offsets up to {range_end} unreadable", exc.offset,
                               range_end)
            return
        if size != o.size:
            yield self._damage(o, f"object is {size} bytes, the manifest says {o.size}", None, range_end)
            return
        wanted = self._wanted(entries, self.next)
        for other, start in later:
            if other.key not in self._tails and self._prefetching():
                self._tails[other.key] = self._submit(self._prefetch, other, start)
        yield from self._serve_runs(o, _Tail(tail, size, footer), wanted, prepared, range_end)

    def _damage(self, o: LiveObject, message: str, position: int | None, upto: int) -> ReadFinding:
        """A DAMAGE finding in object ``o`` from ``self.next`` to ``upto``; the read goes on from ``upto``."""
        f = ReadFinding(DAMAGE, message, self.next, upto, o.id, o.key, position)
        self.next = max(self.next, upto)
        return self._finding(f)

    def _index_of(self, key: str, tail, size: int) -> tuple:
        """The object's footer and index entries: from its tail, or (an index larger than the tail
        read) one more GET. Raises FormatError."""
        footer, entries = obj.parse_tail(tail, size)
        if entries is None:
            index = self.store.read_range(key, footer.index_start_position,
                                          footer.index_start_position + footer.index_block_length)
            entries = obj.decode_index(index, footer, base_position=footer.index_start_position)
        return footer, entries

    def _serve_runs(self, o: LiveObject, tail: _Tail, wanted: list, prepared: Prepared | None,
                    range_end: int) -> Iterator[ReadRecord | ReadFinding]:
        """The ``wanted`` index entries of object ``o``, a run (one GET) at a time, the next run read
        ahead while this one is served; the data crc checked once the runs cover the data region."""
        key, oid = o.key, o.id
        crc = _DataCrc(tail.footer)
        i = 0
        pending = None  # (run, Read) read ahead
        while i < len(wanted) and not self._done():
            run, data, run_crc = self._run_data(key, tail, wanted, i, pending, prepared)
            i += len(run)
            pending = self._read_run_ahead(key, tail, wanted, i)
            run_start, run_end = run[0].block_position, run[-1].block_end
            if len(data) != run_end - run_start:
                yield self._damage(o, f"object ends at {run_start + len(data)}, inside blocks [{run_start}, "
                                   f"{run_end})", run_start + len(data), range_end)
                return
            if crc.add(data, run_start, run_end, run_crc):
                # Said before serving this run: with one run, before anything of the object.
                yield self._finding(ReadFinding(
                    DAMAGE, f"data crc mismatch over [0, {crc.covered}) (expected 0x{tail.footer.data_crc:08X}, "
                    f"found 0x{crc.crc:08X}): a byte of this object changed; its batches passed their "
                    "structure checks, 'walctl inspect-object --deep' narrows it to the block",
                    run[0].start_offset, run[-1].end_offset, oid, key, 0))
            for entry in run:
                yield from self._serve_entry(data, run_start, entry, oid, key)
                if self._done():
                    return

    def _run_data(self, key: str, tail: _Tail, wanted: list, i: int, pending, prepared: Prepared | None):
        """(run, its bytes, its CRC-32C from 0 when a read-ahead thread computed it) of the run starting
        at ``wanted[i]``: read ahead (``pending``, or ``prepared`` for the first), in the tail, or read now."""
        if pending is not None:
            run, read = pending
            return run, read.result(), None
        run = self._next_run(wanted, i)
        span = (run[0].block_position, run[-1].block_end)
        ahead = i == 0 and prepared is not None and prepared.span == span
        if span[0] >= tail.position:
            data = memoryview(tail.data)[span[0] - tail.position:span[1] - tail.position]
        elif ahead:
            data = prepared.data  # read ahead while the previous object was served
            self.summary.block_gets += 1
        else:
            data = self._read_range(key, *span)
            self.summary.block_gets += 1
        return run, data, prepared.crc if ahead else None

    def _read_run_ahead(self, key: str, tail: _Tail, wanted: list, i: int):
        """Start reading the run from ``wanted[i]`` in a read-ahead thread: (run, Read), or None (no
        run left, no read ahead, or the run is in the tail)."""
        if i < len(wanted) and self._prefetching() and wanted[i].block_position < tail.position:
            run = self._next_run(wanted, i)
            self.summary.block_gets += 1
            return run, self._submit(self._read_range, key, run[0].block_position, run[-1].block_end)
        return None

    def _read_composite(self, o: LiveObject, tail: bytes, size: int, range_end: int) -> Iterator[ReadRecord | ReadFinding]:
        """An AutoMQ composite object: its index points into member objects; read their blocks there."""
        from walctl.store.inspect import member_key  # (inspect-object's: a plain object's read does not load it)

        key, oid = o.key, o.id
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
