"""Upload: turn the WAL's records into objects, commit them, then trim the WAL (docs/FORMATS.md 3, 5).

Crash safety, step by step:
1. read the WAL (read-only, no lock) and the newest manifest;
2. skip records at or below this WAL's uploaded offset, after checking the manifest
   really holds them (a re-initialised WAL must not have its new records skipped);
3. commit a manifest that *prepares* the object ids;
4. write the objects;
5. commit a manifest that makes them live and advances the WAL's uploaded offset;
6. trim the WAL to the last uploaded record (with the writer lock; its header is checked,
   the log is not scanned again).
A kill anywhere leaves either prepared ids (gc removes their objects) or records
that the rerun skips; the WAL is never trimmed past what a commit holds.

This module runs the steps in order (scan, judge, plan, put and commit, trim) over one
``UploadRun`` (state.py), handed from step to step. The other rooms: scanindex.py sorts the records
as the scan reads them; judge.py refuses what must not be uploaded; plan.py groups the records into
objects; blocks.py and spool.py write objects as the scan reads (local stores); walread.py reads the
log again for the others; commit.py prepares, makes live or rolls back; handoff.py trims;
background.py is the writer-side uploader.

One device handle a run: the WAL is opened once, read-only and without the writer lock (a writer
may start while upload reads; only the trim takes the lock), and that handle serves the scan (and
its rereads after a writer started), the re-check of the header slots (``_log_moved``) and the
second read (walread.py); it is closed after the commit, before the trim. Two other opens
remain, each for a lock the read-only handle cannot hold: the upload lease (an OFD write lock, which
needs a writable descriptor, held across the rereads of a run) and the trim (walctl.wal.handoff and
lifecycle open the WAL writable under the writer lock, or hand the trim to the writer holding it).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from walctl.errors import NotFoundError, RefusedError, WalctlError
from walctl.failpoints import failpoint
from walctl.format.batch import HEADER_SIZE as BATCH_HEADER_SIZE
from walctl.pipeline.upload import commit, handoff
from walctl.pipeline.upload.judge import judge
from walctl.pipeline.upload.plan import UploadResult, plan_objects
from walctl.pipeline.upload.scanindex import _Records
from walctl.pipeline.upload.state import Options, UploadRun
from walctl.store import manifest as mf

from walctl.defaults import DEFAULT_BLOCK_SIZE, DEFAULT_SPLIT_SIZE  # payload per DataBlock; own Stream Object above

if TYPE_CHECKING:
    from walctl.device.base import Device

    from walctl.store.base import Store

DEFAULT_TRIM_TIMEOUT_S = 30.0  # how long upload waits for a running writer to take its trim
# An upload of at most this many record bytes keeps the bodies the scan read and builds its
# objects from them: each WAL byte is read once. A larger one keeps none (memory must not grow
# with the WAL) and reads the records again, object by object. Well under issue 19's 256 MiB.
KEEP_SCANNED_BYTES = 64 << 20
LEASE_WAIT_S = 600.0  # walctl upload waits this long for another upload of the WAL to end


def upload(wal_path: str, store: Store, *, namespace: str = mf.DEFAULT_NAMESPACE, block_size: int = DEFAULT_BLOCK_SIZE,
           split_size: int = DEFAULT_SPLIT_SIZE, trim: bool = True, dry_run: bool = False,
           accept_gaps: list[tuple[int, int, int]] = (), progress=None,
           trim_timeout_s: float = DEFAULT_TRIM_TIMEOUT_S, max_bytes: int | None = None,
           lease_wait_s: float = LEASE_WAIT_S, on_wait=None, salvage: bool = False) -> UploadResult:
    """Upload the WAL's records after the trim point; commit; trim to the last one uploaded.

    The WAL is read without the writer lock, so a writer may start, append and stop meanwhile
    (only the trim takes the lock, or goes through the writer's hand-off). A log a live writer
    appends to is uploaded up to its first block in flight; a log that was quiet for the whole
    scan (no lock holder, the header slots unchanged) has every finding judged as damage.

    Args:
        accept_gaps: (stream, from, to): stream offsets [from, to) the operator accepts as gone
            (``--accept-gap``); such a gap is uploaded as a gap and recorded in the manifest.
        trim_timeout_s: how long a live writer may take to do the trim (the hand-off).
        progress: if given, ``progress(done, total)`` is called with the payload bytes uploaded so far.
        max_bytes: upload at most about this many bytes of log (whole records, from the first one
            not uploaded yet): the writer-side uploader's ``--upload-at`` cap on each upload.
        lease_wait_s: how long to wait while another upload of this WAL runs (the upload lease,
            walctl.device.lease.take_lease; ``on_wait(message)`` is told once), then UploadBusy.
            Two uploads of one WAL never run at once: the second would upload the same records
            again and lose the commit race.
        salvage: walctl salvage (salvage.py): no writer may run; the scan reads past damage below
            the durable end, each stream range lost in it is recorded as a gap (cause
            "corruption"), the damaged bytes are kept as evidence before the trim.
    Returns an UploadResult; ``bad_records`` lists records whose body is no StreamRecordBatch:
    they are not uploaded and the WAL is not trimmed past the first of them (see 'recover').
    """
    opts = Options(namespace, block_size, split_size, trim, dry_run, tuple(accept_gaps), progress, trim_timeout_s,
                   max_bytes, salvage)
    lease = None if dry_run else _take_lease(wal_path, lease_wait_s, on_wait)
    try:
        dev = _open_for_upload(wal_path)
        try:
            u = _upload_leased(wal_path, store, opts, dev)
            if salvage and u.damage:
                from walctl.pipeline.upload.salvage import keep_evidence

                keep_evidence(u)  # before the trim makes the damaged bytes dead
        finally:
            dev.close()  # no lock was taken: appends went on during the upload
        if not dry_run:
            _trim(u)
        return u.result
    finally:
        if lease is not None:
            lease.release()


class UploadBusy(RefusedError):
    """Another upload of this WAL held the upload lease for the whole wait."""


def _take_lease(wal_path: str, wait_s: float, on_wait):
    """The WAL's upload lease (None where the device cannot be opened for writing: a read-only
    medium still uploads, unguarded), or UploadBusy."""
    from walctl.device.lease import take_lease
    from walctl.device.opening import open_error

    said = (lambda: on_wait(f"{wal_path}: another upload of this WAL is running; waiting up to {wait_s:g} s "
                            f"for it to end")) if on_wait is not None else None
    try:
        lease = take_lease(wal_path, wait_s=wait_s, on_wait=said)
    except OSError as exc:
        err = open_error(exc, wal_path)
        if isinstance(err, NotFoundError):
            raise err from exc
        return None
    if lease is None:
        raise UploadBusy("another upload of this WAL is running", where=wal_path,
                         hint="nothing was uploaded; rerun when it has ended (it uploads the same records)")
    return lease


def _upload_leased(wal_path: str, store: Store, opts: Options, dev: Device) -> UploadRun:
    """upload() once its lease is held, up to its commit: read the log as quiet, then again (same
    handle) as a live writer's if a writer started or stopped meanwhile (_WriterStarted)."""
    live = None  # not known yet: the scan looks for a writer
    while True:
        spools = _new_spools(store, opts)
        try:
            return _upload_once(wal_path, store, opts, spools, live, dev)
        except _WriterStarted:
            live = True  # read again as a live writer's log: up to its first block in flight
        finally:
            if spools is not None:
                spools.close()  # the temp objects of an upload that did not publish them


def _new_spools(store: Store, opts: Options):
    """The spools of an upload whose objects are written as the scan reads (spool.py), or None:
    a dry run, a store without ``open_spool`` (S3), or blocks above SPOOL_MAX_BLOCK."""
    if opts.dry_run or not callable(getattr(store, "open_spool", None)):
        return None
    from walctl.pipeline.upload import spool

    if spool.SPOOL_SEGMENTS > 0 and opts.block_size <= spool.SPOOL_MAX_BLOCK:
        return spool._Spools(store, opts.block_size, spool.SPOOL_SEGMENTS)
    return None


class _WriterStarted(Exception):
    """A writer started (or stopped) during a scan that took the log for quiet, and the scan found
    what may be its blocks in flight: the upload reads the log again as a live writer's."""


def check_wal(wal_path: str) -> None:
    """Raise what the upload itself would for a DEVICE that holds no WAL walctl uploads (missing,
    a directory or FIFO, no valid header, capacity past its end, another flavour), having read only
    the header slots: the command calls it before a real upload creates its store."""
    from walctl.wal.lifecycle import read_wal_state

    dev = _open_for_upload(wal_path)
    try:
        _check_flavour(read_wal_state(dev, wal_path).header, wal_path)
    finally:
        dev.close()


def _check_flavour(header, wal_path: str) -> None:
    if header.flavour != "walctl":
        raise RefusedError(f"{header.flavour} WAL: upload reads only walctl's WALs", where=wal_path,
                           hint="read its records with 'walctl recover'; AutoMQ uploads its own WAL")


def _open_for_upload(wal_path: str):
    """The device, read-only and without the writer lock: a writer may start while upload reads
    (docs/CLI.md: only upload's trim takes the lock)."""
    from walctl.device import open_device

    return open_device(wal_path, writable=False, ask_holder=False)  # (_scan asks when the header says to)


def _upload_once(wal_path: str, store: Store, opts: Options, spools, live: bool | None, dev: Device) -> UploadRun:
    """One pass over the WAL open read-only (``dev``): scan, judge, plan, then put and commit."""
    u = UploadRun(wal_path, store, opts, spools, live, dev, time.monotonic())
    _scan(u)
    judge(u)
    _plan(u)
    if opts.dry_run:
        u.result.seconds = time.monotonic() - u.started
    elif u.plan:
        _put_and_commit(u)
    return u


def _scan(u: UploadRun) -> None:
    """Read the header slots and the manifest, then the log: each record sorted as it is read."""
    from walctl.wal import reader
    from walctl.wal.lifecycle import read_wal_state

    u.state = read_wal_state(u.dev, u.wal_path)
    header = u.header = u.state.header
    _check_flavour(header, u.wal_path)
    if u.live is not None:  # a second read
        u.result.warnings.append(f"{u.wal_path}: a writer started or stopped while upload read the log; read "
                                 f"it again, up to its first block in flight")
    elif not header.clean and _writer_holds(u.wal_path):  # (a clean header: no writer has opened it)
        u.live = True
        u.result.warnings.append(f"{u.wal_path}: a writer is active; uploading the records before its blocks "
                                 f"in flight")
    # The manifest first: the scan sorts each record as it reads it and keeps no record's bytes.
    u.doc = mf.load_latest(u.store)
    u.node_key = str(header.node_id)
    u.mark = u.doc.upload_mark(u.node_key)
    u.scan = reader.ScanResult(header, reader.Ring(header.capacity), durable=_durable(u))
    u.records = _Records(u.doc, u.mark, u.scan, _keep_bytes(header, u.spools), u.spools)
    events = reader.Scan(u.dev, header, report=u.scan, probe=not u.live, bulk=True, readahead=True)
    try:
        failpoint("upload-scan")  # (tests: a writer starts while upload reads the log)
        _read_log(u, events)
        if (not u.live and any(f.kind != reader.BAD_BATCH for f in u.findings)
                and _log_moved(u.dev, u.wal_path, header)):
            if u.opts.salvage:
                raise RefusedError("a writer started while salvage read the log", where=u.wal_path,
                                   hint="stop every writer of this WAL, then rerun salvage; nothing was uploaded")
            raise _WriterStarted()
    finally:
        events.close()  # its read-ahead ends before the device closes


def _durable(u: UploadRun):
    """Salvage reads past damage below the durable points the header slots record (as recover);
    an upload does not (it refuses damage), nor does a scan of a live writer's log."""
    if not u.opts.salvage:
        return None
    from walctl.wal.verdict import durable_points

    return durable_points(u.state)


def _keep_bytes(header, spools) -> int:
    """How many record bytes the scan keeps (KEEP_SCANNED_BYTES); none for a larger log whose
    objects the spools write: its bodies would be copied, then dropped."""
    if spools is not None and header.clean and header.next_offset - max(header.trim_offset, 0) > KEEP_SCANNED_BYTES:
        return 0
    return KEEP_SCANNED_BYTES


def _read_log(u: UploadRun, events) -> None:
    """Hand the scan's events to the records (findings aside), up to the --upload-at cap."""
    from walctl.wal import reader

    records, findings, run_type = u.records, u.findings, reader.Run
    # --upload-at: records from this offset on wait for the next upload
    cap_end = None if u.opts.max_bytes is None else (
        max(u.header.trim_offset, u.mark.offset if u.mark else -1, 0) + u.opts.max_bytes)
    for event in events:
        if isinstance(event, reader.Finding):
            findings.append(event)
            if u.live and event.kind != reader.BAD_BATCH:
                # A live writer's blocks in flight read as holes: upload only the prefix before them.
                records.stop()
        elif cap_end is not None and event.end > cap_end and _stop_at_cap(records, event, cap_end):
            break
        elif type(event) is run_type:  # intact batches, in bulk: most of the log
            records.add_run(event)
        else:
            records.add(event)


def _stop_at_cap(records: _Records, event, cap_end: int) -> bool:
    """For an event that ends past the --upload-at cap: True when the upload stops before the rest
    of the log (a run's records that start before the cap taken first); False when the event is
    taken whole (a record that starts before the cap, or any while nothing is to upload yet)."""
    from walctl.wal.reader import Run

    if event.offset >= cap_end and records.todo_count:
        return True
    if type(event) is Run:  # the run's records that start before the cap, then stop
        records.add_run(_run_before(event, cap_end))
        return True
    return False


def _plan(u: UploadRun) -> None:
    """Group the segments into objects; close the spools' last blocks; count what is to upload."""
    u.plan = plan_objects(u.streams, u.opts.split_size, u.after_gaps)
    if u.spools is not None:  # the plan's own Stream Objects written as the scan read them: their last blocks
        u.spools.finish(u.plan)
    result, records = u.result, u.records
    result.records = records.todo_count
    result.payload_bytes = records.todo_bytes - result.records * BATCH_HEADER_SIZE
    u.last_mark = records.last_mark
    result.last_offset = (u.last_mark.offset if u.last_mark
                          else (records.skipped[-1] if records.skipped else None))
    if u.opts.dry_run:
        result.objects = [{"id": None, "key": None, "kind": p.kind, "size_bytes": None,
                           "data_bytes": p.data_bytes, "streams": p.ranges()} for p in u.plan]


def _put_and_commit(u: UploadRun) -> None:
    """Prepare the ids, write the objects, commit them live (commit.py); roll back on any failure
    (SIGTERM/SIGINT included) before the commit."""
    opts, result = u.opts, u.result
    expected_ends = {sid: commit.stream_end(u.doc, sid) for sid in u.streams}
    prepared = commit.prepare(u.store, len(u.plan), opts.namespace)
    # Objects not spooled are built and sent a DataBlock at a time from the bodies the scan kept,
    # or (more than KEEP_SCANNED_BYTES) from a second read of the WAL through the run's handle (no
    # lock: the records are checked to be the ones scanned), so memory stays bounded.
    fetch = None
    if not all(p.spooled for p in u.plan):
        from walctl.pipeline.upload.walread import _WalBatches

        fetch = _WalBatches(u.dev, u.wal_path, u.header, u.scan.end_offset, u.records.kept)
    try:
        failpoint("upload-after-prepare")
        made = commit.put_objects(u.store, u.plan, prepared, fetch, opts.block_size, u.spools, opts.progress)
        failpoint("upload-before-commit")
    except BaseException:  # SIGTERM/SIGINT or a failure before the commit: roll the step back
        if fetch is not None:
            fetch.close()
        commit.roll_back(u.store, prepared, result.warnings)
        raise
    result.commit_number = commit.make_live(u.store, made, u.node_key, u.mark, u.last_mark, expected_ends,
                                            result.gaps, u.header.node_id)
    result.objects = [{"id": o.id, "key": o.key, "kind": o.kind, "size_bytes": o.size,
                       "streams": [r.to_json() for r in o.ranges]} for o in made]
    failpoint("upload-after-commit")


def _trim(u: UploadRun) -> None:
    """The trim after the commit (handoff.py); a failure still carries the result (committed)."""
    try:
        handoff.trim_after_commit(u.wal_path, u.header.trim_offset, u.records, u.result, trim=u.opts.trim,
                                  timeout_s=u.opts.trim_timeout_s)
    except WalctlError as exc:
        exc.result = u.result  # committed: the caller still reports what was uploaded
        raise
    finally:
        u.result.seconds = time.monotonic() - u.started


def _run_before(run, end: int):
    """The leading records of ``run`` (a walctl.wal.ringread.Run) that start before ``end`` (at least one)."""
    from bisect import bisect_left

    from walctl.wal.reader import Run

    stop = max(1, bisect_left(run.column(0), end))
    return Run(run.chunk, run.rows, run.first, run.first + stop)


def _log_moved(dev, wal_path: str, header) -> bool:
    """True when the header slots changed since ``header`` was read, or (a log not closed cleanly) a
    writer holds it now. A writer's open rewrites a clean header before it appends anything, so an
    unchanged clean header needs no look at /proc/locks."""
    from walctl.wal.lifecycle import read_wal_state

    if read_wal_state(dev, wal_path).header != header:
        return True
    return not header.clean and _writer_holds(wal_path)


def _writer_holds(wal_path: str) -> bool:
    """A writer holds the WAL's lock now (/proc/locks: a read that costs a kernel grace period)."""
    from walctl.device.locks import lock_holder

    return lock_holder(wal_path) is not None
