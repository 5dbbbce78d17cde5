"""Upload: turn the WAL's records into objects, commit them, then trim the WAL (docs/FORMATS.md 3, 5).

Crash safety, step by step:
1. read the WAL (read-only, no lock) and the newest manifest;
2. skip records at or below this WAL's uploaded offset, after checking the manifest
   really holds them (a re-initialised WAL must not have its new records skipped);
3. commit a manifest that *prepares* the object ids;
4. write the objects;
5. commit a manifest that makes them live and advances the WAL's uploaded offset;
6. trim the WAL to the last uploaded record (with the writer lock).
A kill anywhere leaves either prepared ids (gc removes their objects) or records
that the rerun skips; the WAL is never trimmed past what a commit holds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from walctl.errors import CorruptionError, RefusedError, UsageError, WalctlError
from walctl.failpoints import failpoint
from walctl.format.batch import StreamRecordBatch
from walctl.store import manifest as mf

from walctl.defaults import DEFAULT_BLOCK_SIZE, DEFAULT_SPLIT_SIZE  # payload per DataBlock; own Stream Object above

DEFAULT_TRIM_TIMEOUT_S = 30.0  # how long upload waits for a running writer to take its trim


@dataclass
class PlannedObject:
    kind: str  # "SO" or "SSO"
    streams: list[tuple[int, list[StreamRecordBatch]]]

    @property
    def data_bytes(self) -> int:
        return sum(b.size for _, batches in self.streams for b in batches)

    def ranges(self) -> list[dict]:
        return [{"stream_id": sid, "start": batches[0].base_offset, "end": batches[-1].end_offset,
                 "bytes": sum(b.size for b in batches)} for sid, batches in self.streams]


@dataclass
class UploadResult:
    objects: list[dict] = field(default_factory=list)
    records: int = 0
    payload_bytes: int = 0
    skipped_records: int = 0
    last_offset: int | None = None
    trimmed_to: int | None = None
    commit_number: int | None = None
    dry_run: bool = False
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    gaps: list[dict] = field(default_factory=list)  # stream gaps uploaded as gaps, and why
    bad_records: list[dict] = field(default_factory=list)  # records left in the WAL: no StreamRecordBatch

    def to_json(self) -> dict:
        return {
            "objects": self.objects, "objects_made": len(self.objects), "records": self.records,
            "payload_bytes": self.payload_bytes, "skipped_records": self.skipped_records,
            "last_offset": self.last_offset, "trimmed_to": self.trimmed_to,
            "commit_number": self.commit_number, "dry_run": self.dry_run, "seconds": round(self.seconds, 6),
            "gaps": self.gaps, "bad_records": self.bad_records,
        }


def plan_objects(streams: dict[int, list[StreamRecordBatch]], split_size: int,
                 after_gaps: list[tuple[int, list[StreamRecordBatch]]] = ()) -> list[PlannedObject]:
    """One stream: one SO. Several: an SO per stream of >= split_size data bytes, the rest in one SSO.

    ``after_gaps`` are the parts of streams after a crash gap: an object holds each stream
    contiguously, so each such part becomes a Stream Object of its own.
    """
    ordered = sorted(streams.items())
    extra = [PlannedObject("SO", [(sid, batches)]) for sid, batches in after_gaps]
    if not ordered:
        return extra
    if len(ordered) == 1:
        return [PlannedObject("SO", ordered)] + extra
    plan, rest = [], []
    for sid, batches in ordered:
        if sum(b.size for b in batches) >= split_size:
            plan.append(PlannedObject("SO", [(sid, batches)]))
        else:
            rest.append((sid, batches))
    if rest:
        plan.append(PlannedObject("SSO", rest))
    return plan + extra


def _check_streams(entries, manifest: dict, holes, accepted: set[tuple[int, int, int]],
                   before: dict[int, int], where: str, warnings: list[str],
                   gaps_out: list[dict]) -> tuple[dict[int, list[StreamRecordBatch]], list]:
    """Group records by stream; refuse overlaps and unexplained gaps (against the store and inside the WAL).

    A gap is accepted where a crash explains it (walctl.wal.gaps.explain: a crash hole, sealed
    or not, lies between the stream's two records: the lost batches were never acknowledged)
    or where the operator accepted exactly that gap (``accepted``: (stream, from, to), from
    ``upload --accept-gap``). Each accepted gap is kept as a gap, with a warning and an entry
    in ``gaps_out`` (the manifest records it); what follows a gap inside the WAL is returned as
    a separate segment (an object holds each stream contiguously).

    Args:
        before: stream -> WAL offset of its last record already in the store (still in the WAL).
    Returns (first segment of each stream, [(stream, later segment), ...]).
    """
    from walctl.wal import gaps

    segments: dict[int, list[list[StreamRecordBatch]]] = {}
    last: dict[int, tuple[int, int]] = {}  # stream -> (WAL offset, end offset) of its last batch

    def allow(gap) -> None:
        hole = gaps.explain(gap, holes)
        key = (gap.stream_id, gap.from_offset, gap.to_offset)
        if hole is None and key not in accepted:
            raise CorruptionError(
                f"stream {gap.stream_id}: offset gap ({gap.from_offset} to {gap.to_offset}) that no crash "
                f"explains, before the record at WAL offset {gap.after_wal_offset}; nothing was uploaded",
                where=where, offset=gap.after_wal_offset,
                hint=f"a wrong --base-offset, or damage; if these offsets are really gone: rerun with "
                     f"--accept-gap {gap.spec} (recorded in the manifest; nothing else is skipped)")
        warnings.append(gaps.explanation(gap, hole, accepted=hole is None))
        item = gaps.gap_to_json(gap, hole, accepted=hole is None)
        gaps_out.append({k: item[k] for k in ("stream_id", "from", "to", "cause", "hole_start", "sealed",
                                               "sealed_at_ns", "before_wal_offset", "after_wal_offset")})

    for entry in entries:
        batch = entry.batch
        sid = batch.stream_id
        if sid not in segments:
            known = manifest["streams"].get(str(sid))
            if known is not None and batch.base_offset != known["end"]:
                if batch.base_offset < known["end"]:
                    raise CorruptionError(
                        f"stream {sid}: offset overlap against the store: the store ends at {known['end']}, "
                        f"the WAL continues at {batch.base_offset}", where=where, offset=entry.offset,
                        hint="the WAL and the store disagree; nothing was uploaded")
                allow(gaps.StreamGap(sid, known["end"], batch.base_offset, before.get(sid), entry.offset))
            segments[sid] = [[batch]]
        else:
            prev_offset, prev_end = last[sid]
            if batch.base_offset < prev_end:
                prev = segments[sid][-1][-1]
                raise CorruptionError(f"stream {sid}: offsets overlap in the WAL ({prev.base_offset}..{prev.end_offset} "
                                      f"then {batch.base_offset})", where=where, offset=entry.offset)
            if batch.base_offset > prev_end:
                allow(gaps.StreamGap(sid, prev_end, batch.base_offset, prev_offset, entry.offset))
                segments[sid].append([])
            segments[sid][-1].append(batch)
        last[sid] = (entry.offset, batch.end_offset)
    later = [(sid, seg) for sid, segs in sorted(segments.items()) for seg in segs[1:]]
    return {sid: segs[0] for sid, segs in segments.items()}, later


def upload(wal_path: str, store, *, namespace: str = mf.DEFAULT_NAMESPACE, block_size: int = DEFAULT_BLOCK_SIZE,
           split_size: int = DEFAULT_SPLIT_SIZE, trim: bool = True, dry_run: bool = False,
           accept_gaps: list[tuple[int, int, int]] = (), progress=None,
           trim_timeout_s: float = DEFAULT_TRIM_TIMEOUT_S) -> UploadResult:
    """Upload the WAL's records after the trim point; commit; trim to the last one uploaded.

    Args:
        accept_gaps: (stream, from, to): stream offsets [from, to) the operator accepts as gone
            (``--accept-gap``); such a gap is uploaded as a gap and recorded in the manifest.
        trim_timeout_s: how long a live writer may take to do the trim (the hand-off).
        progress: if given, ``progress(done, total)`` is called with the payload bytes uploaded so far.
    Returns an UploadResult; ``bad_records`` lists records whose body is no StreamRecordBatch:
    they are not uploaded and the WAL is not trimmed past the first of them (see 'recover').
    """
    from walctl.format.object import build_object
    from walctl.wal import gaps, reader
    from walctl.wal.ops import read_wal_state

    started = time.monotonic()
    result = UploadResult(dry_run=dry_run)
    dev, locked = _open_for_upload(wal_path, result.warnings)
    try:
        header = read_wal_state(dev, wal_path).header
        if header.flavour != "walctl":
            raise RefusedError(f"{header.flavour} WAL: upload reads only walctl's WALs", where=wal_path)
        scan = reader.ScanResult(header, reader.Ring(header.capacity))
        entries, findings = [], []
        for event in reader.scan(dev, header, result=scan, probe=locked):
            (findings if isinstance(event, reader.Finding) else entries).append(event)
    finally:
        dev.close()  # the lock only covered the read: appends may go on during the upload
    # A bad batch (a valid record whose body is no StreamRecordBatch) stops only itself: the
    # other records are uploaded, the WAL is not trimmed past it, 'recover' shows it.
    damage = [f for f in scan.corrupt if f.kind != reader.BAD_BATCH]
    if damage:
        first = damage[0]
        raise CorruptionError(f"the WAL is damaged ({first.kind} at offset {first.offset}); nothing uploaded",
                              where=wal_path, offset=first.offset, hint="inspect with 'walctl recover'")
    bad_findings = {f.offset: f for f in findings if f.kind == reader.BAD_BATCH}
    findings = [f for f in findings if f.kind != reader.BAD_BATCH]
    if not locked and findings:
        # A live writer's blocks in flight read as holes: upload only the prefix before them.
        cut = min(f.offset for f in findings)
        entries = [e for e in entries if e.offset < cut]
        findings = []
    bad = [e for e in entries if e.batch is None]
    entries = [e for e in entries if e.batch is not None]
    result.bad_records = [{"offset": e.offset, "body_bytes": len(e.body),
                           "reason": bad_findings[e.offset].reason if e.offset in bad_findings
                           else "body is not a StreamRecordBatch"} for e in bad]
    holes = gaps.holes_of(findings, scan.sealed_holes)
    accepted = {tuple(a) for a in accept_gaps}

    doc = mf.load_latest(store)
    node_key = str(header.node_id)
    mark = doc["wal_uploads"].get(node_key)
    uploaded = mark["offset"] if mark else -1
    if mark:
        _check_same_wal(mark, entries, scan, wal_path, node_key)
    skipped = [e for e in entries if e.offset <= uploaded]
    todo = [e for e in entries if e.offset > uploaded]
    for e in skipped:
        if not _in_store(doc, e.batch):
            raise CorruptionError(
                f"the store says this WAL (node {node_key}) is uploaded up to offset {uploaded}, but the record "
                f"at {e.offset} is not in the store", where=wal_path, offset=e.offset,
                hint="the WAL was re-initialised, or two WALs share a node id: give each WAL its own --node-id")
    result.skipped_records = len(skipped)
    before: dict[int, int] = {}
    if scan.trim_entry is not None and scan.trim_entry.batch is not None:
        before[scan.trim_entry.batch.stream_id] = scan.trim_entry.offset
    for e in skipped:
        before[e.batch.stream_id] = e.offset
    streams, after_gaps = _check_streams(todo, doc, holes, accepted, before, wal_path, result.warnings,
                                         result.gaps)
    used = {(g["stream_id"], g["from"], g["to"]) for g in result.gaps if g["cause"] == "accepted"}
    recorded = {(g["stream_id"], g["from"], g["to"]) for g in doc.get("stream_gaps", [])}
    for sid, lo, hi in sorted(accepted - used):
        if (sid, lo, hi) in recorded:
            result.warnings.append(f"--accept-gap {sid}:{lo}-{hi}: already recorded in the manifest")
            continue
        raise UsageError(f"--accept-gap {sid}:{lo}-{hi} matches no gap in what this upload would upload",
                         where=wal_path, hint="'walctl recover' and 'walctl status' list the gaps; "
                                              "give exactly stream:from-to of one")
    plan = plan_objects(streams, split_size, after_gaps)
    result.records = len(todo)
    result.payload_bytes = sum(len(e.batch.payload) for e in todo)
    result.last_offset = todo[-1].offset if todo else (skipped[-1].offset if skipped else None)

    if dry_run:
        result.objects = [{"id": None, "key": None, "kind": p.kind, "size_bytes": None,
                           "data_bytes": p.data_bytes, "streams": p.ranges()} for p in plan]
        result.seconds = time.monotonic() - started
        return result

    if plan:
        expected_ends = {sid: (doc["streams"].get(str(sid)) or {}).get("end") for sid in streams}
        prepared: list[dict] = []

        def prepare(m: dict) -> None:
            prepared[:] = mf.prepare_ids(m, len(plan), namespace)

        mf.commit(store, prepare, command="upload (prepare)")
        made = []
        try:
            failpoint("upload-after-prepare")
            for planned, reservation in zip(plan, prepared):
                built = build_object(planned.streams, block_size=block_size)
                store.put_large(reservation["key"], built.data)
                # bytes: the stream's span in the object (its DataBlocks, headers included)
                ranges = [{"stream_id": sid, "start": rg.start_offset, "end": rg.end_offset,
                           "bytes": rg.size_bytes} for sid, rg in sorted(built.ranges.items())]
                made.append({"id": reservation["id"], "key": reservation["key"], "kind": planned.kind,
                             "size": len(built.data), "order_id": reservation["id"],
                             "data_time": time.time(), "ranges": ranges})
                if progress is not None:
                    progress(sum(p.data_bytes for p in plan[:len(made)]), sum(p.data_bytes for p in plan))
            failpoint("upload-before-commit")
        except BaseException:  # SIGTERM/SIGINT or a failure before the commit: roll the step back
            _release(store, prepared, result.warnings)
            raise

        def make_live(m: dict) -> None:
            ids = {o["id"] for o in made}
            still = {p["id"] for p in m["prepared"]}
            if not ids <= still:
                raise RefusedError("the prepared object ids were collected by gc during the upload",
                                   where=store.url, hint="rerun upload; nothing was lost")
            if m["wal_uploads"].get(node_key) != mark:
                raise RefusedError(f"another upload of this WAL (node {node_key}) committed first",
                                   where=store.url, hint="rerun upload: it skips what is already uploaded")
            for sid, end in expected_ends.items():
                now_end = (m["streams"].get(str(sid)) or {}).get("end")
                if now_end != end:
                    raise RefusedError(f"stream {sid} changed in the store during the upload "
                                       f"(end {end} -> {now_end})", where=store.url, hint="rerun upload")
            m["prepared"] = [p for p in m["prepared"] if p["id"] not in ids]
            m["objects"].extend(made)
            for obj in made:
                for r in obj["ranges"]:
                    s = m["streams"].setdefault(str(r["stream_id"]), {"start": r["start"], "end": r["end"]})
                    s["start"] = min(s["start"], r["start"])
                    s["end"] = max(s["end"], r["end"])
            m["wal_uploads"][node_key] = upload_mark(todo[-1])
            if result.gaps:  # why these streams have gaps: a crash, or the operator's --accept-gap
                now = time.time()
                m.setdefault("stream_gaps", []).extend(
                    {**g, "node_id": header.node_id, "time": now} for g in result.gaps)

        committed = mf.commit(store, make_live, command="upload")
        result.commit_number = committed.number
        result.objects = [{"id": o["id"], "key": o["key"], "kind": o["kind"], "size_bytes": o["size"],
                           "streams": o["ranges"]} for o in made]
        failpoint("upload-after-commit")

    trim_to = result.last_offset
    if bad:
        # Leave the first bad record live for 'recover': trim only to the last record before it.
        kept = [e.offset for e in skipped + todo if e.offset < bad[0].offset]
        trim_to = kept[-1] if kept else None
        first = bad[0]
        result.warnings.append(
            f"{len(bad)} record(s) are not StreamRecordBatches and were not uploaded (first at WAL offset "
            f"{first.offset}); the WAL is not trimmed past it: save it with 'walctl recover {wal_path} "
            f"--from {first.offset} --to {first.offset + 1} --payload hex', then drop it with "
            f"'walctl trim {wal_path} {max(e.offset for e in skipped + todo + bad)}'")
    if trim and trim_to is not None and trim_to > header.trim_offset:
        try:
            result.trimmed_to = _trim_after(wal_path, trim_to, result.warnings, trim_timeout_s)
        except WalctlError as exc:
            exc.result = result  # committed: the caller still reports what was uploaded
            result.seconds = time.monotonic() - started
            raise
    result.seconds = time.monotonic() - started
    return result


def _release(store, prepared: list[dict], warnings: list[str]) -> None:
    """Undo an upload that will not commit: delete the objects written for its prepared ids and
    release the ids. Best effort: what is left expires with the ids' TTL and gc deletes it."""
    ids = {p["id"] for p in prepared}
    try:
        for p in prepared:
            store.delete(p["key"])

        def release(m: dict) -> None:
            m["prepared"] = [p for p in m["prepared"] if p["id"] not in ids]

        mf.commit(store, release, command="upload (roll back)")
    except Exception as exc:  # the original error is the one to report
        warnings.append(f"could not roll back the prepared objects {sorted(ids)} ({exc}); "
                        f"they expire within an hour and gc deletes them")


def upload_mark(entry) -> dict:
    """What the manifest remembers of a WAL's last uploaded record: enough to know it again."""
    from walctl.format.crc import crc32c

    return {"offset": entry.offset, "stream_id": entry.batch.stream_id, "base_offset": entry.batch.base_offset,
            "body_crc": crc32c(entry.body)}


def _check_same_wal(mark: dict, entries, scan, wal_path: str, node_key: str) -> None:
    """Refuse unless this WAL still holds the record it last uploaded (or was trimmed past it).

    A re-initialised WAL (or another WAL with the same node id) reuses small offsets: without
    this check its new records would be skipped as "already uploaded", then trimmed.
    """
    offset = mark["offset"]
    if offset < scan.start_offset:
        return  # trimmed past the mark: everything left is newer than it
    found = scan.trim_entry if scan.trim_entry is not None and scan.trim_entry.offset == offset else None
    if found is None:
        found = next((e for e in entries if e.offset == offset), None)
    if found is None or found.batch is None or upload_mark(found) != mark:
        raise CorruptionError(
            f"this WAL does not hold the record that node {node_key} last uploaded (offset {offset}, stream "
            f"{mark['stream_id']}, stream offset {mark['base_offset']}): refusing to skip or trim anything",
            where=wal_path, offset=offset,
            hint="the WAL was re-initialised, or two WALs share a node id: give each WAL its own --node-id")


def _in_store(doc: dict, batch) -> bool:
    """A batch is in the store when a live object's range holds it, or retention dropped it."""
    stream = doc["streams"].get(str(batch.stream_id))
    if stream is None:
        return False
    if batch.end_offset <= stream["start"]:
        return True
    return any(r["stream_id"] == batch.stream_id and r["start"] <= batch.base_offset and batch.end_offset <= r["end"]
               for o in doc["objects"] for r in o["ranges"])


def _open_for_upload(wal_path: str, warnings: list[str]):
    """Take the writer lock for the read when it is free, so no write can be in flight.

    Returns (device, locked). Busy (a writer is appending): read-only, and the caller
    uploads only the prefix before the first damage (the writer's blocks in flight).
    """
    from walctl.device import open_device

    try:
        return open_device(wal_path, writable=True), True
    except RefusedError:
        warnings.append(f"{wal_path}: a writer is active; uploading the records before its blocks in flight")
        dev = open_device(wal_path, writable=False)
        return dev, False


def _trim_after(wal_path: str, offset: int, warnings: list[str], timeout_s: float) -> int | None:
    """Trim to the last uploaded record: directly, or by the running writer through its hand-off
    socket (FORMATS.md 1.7), retrying up to ``timeout_s``; TrimPendingError when neither happened.
    A moved trim point (someone trimmed past it) only costs a warning (upload is idempotent)."""
    from walctl.wal.handoff import trim_or_hand_off
    from walctl.wal.ops import trim_wal

    try:
        how = trim_or_hand_off(wal_path, offset, timeout_s, trim_wal)
        if how == "writer":
            warnings.append(f"{wal_path}: a writer is active; it took the trim to {offset}")
        return offset
    except UsageError as exc:
        warnings.append(f"{wal_path}: not trimmed ({exc.what}); the next upload skips what is already uploaded")
        return None
    except WalctlError:
        raise


DEFAULT_UPLOAD_AT = 512 << 20  # AutoMQ's default: upload once this much of the WAL is not yet uploaded
UPLOAD_POLL_S = 0.05  # how often the background uploader looks at the writer's acknowledged end


@dataclass
class BackgroundStats:
    uploads: int = 0
    records: int = 0
    objects: int = 0
    failures: int = 0
    last_error: str | None = None

    def to_json(self) -> dict:
        return {"uploads": self.uploads, "records": self.records, "objects": self.objects,
                "failures": self.failures, "last_error": self.last_error}


class BackgroundUploader:
    """Writer-side upload (AutoMQ's broker does the same): from inside the writer's process, each
    time ``upload_at`` bytes of acknowledged log lie past the trim point, upload them, commit, and
    trim through the writer itself. Appends and acknowledgements never wait for it.

    Crash safety is upload()'s: a kill at any moment leaves prepared ids (gc) or a commit whose
    records a rerun of ``walctl upload`` skips; the trim follows the commit.
    """

    def __init__(self, wal_path: str, store, writer, upload_at: int, *, on_warning=None, **upload_options):
        import threading

        self.wal_path = wal_path
        self.store = store
        self.writer = writer
        self.upload_at = upload_at
        self.options = upload_options
        self.on_warning = on_warning
        self.stats = BackgroundStats()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="walctl-uploader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Let a running upload finish (its commit and trim), then stop."""
        self._stop.set()
        self._thread.join()

    def pending_bytes(self) -> int:
        return self.writer.acked_end - max(self.writer.header.trim_offset, 0)

    def _loop(self) -> None:
        while not self._stop.wait(UPLOAD_POLL_S):
            if self.pending_bytes() < self.upload_at:
                continue
            try:
                self.upload_once()
            except Exception as exc:  # the writer goes on; the next round (or walctl upload) retries
                self.stats.failures += 1
                self.stats.last_error = str(exc)
                if self.on_warning is not None:
                    self.on_warning(f"{self.wal_path}: background upload failed ({exc}); retrying later")
                self._stop.wait(1.0)

    def upload_once(self) -> UploadResult:
        result = upload(self.wal_path, self.store, trim=False, **self.options)
        self.stats.uploads += 1
        self.stats.records += result.records
        self.stats.objects += len(result.objects)
        if result.last_offset is not None and result.last_offset > self.writer.header.trim_offset:
            deadline = time.monotonic() + 5.0
            while True:
                try:
                    self.writer.trim_to(result.last_offset, uploaded=True)
                    break
                except UsageError:
                    # durable (upload read it) but its acknowledgement is a moment behind
                    if time.monotonic() > deadline or result.last_offset < self.writer.header.trim_offset:
                        raise
                    time.sleep(0.01)
            result.trimmed_to = result.last_offset
        return result
