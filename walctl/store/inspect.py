"""inspect-object: read an object's footer and index (at most two ranged reads), or verify it all."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from walctl.errors import BadMagicError, FormatError, NotFoundError, TruncatedError, UsageError, ZeroedError
from walctl.sizes import plural
from walctl.store.base import S3Settings, Store
from walctl.store.manifest import DEFAULT_NAMESPACE, object_key

AUTOMQ_NAMESPACE = "DEFAULT"  # AutoMQ ObjectUtils' default namespace (walctl's is "default")
TAIL_READ_BYTES = 64 << 10  # one read catches the footer and an index of up to ~1800 entries
DEEP_READ_BYTES = 16 << 20  # --deep reads the object in ranged GETs of this size


@dataclass
class InspectResult:
    key: str
    size_bytes: int
    footer: object
    entries: list
    reads: int
    deep: bool = False
    problems: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    report: object = None  # format.object.VerifyReport of a --deep run
    composite: object = None  # format.object.CompositeObject: AutoMQ's links to member objects

    def verdict(self) -> str:
        """One line saying what --deep established (empty without --deep)."""
        if not self.deep or self.report is None:
            return ""
        r = self.report
        checked = f"{r.entries} index entries, {r.blocks} blocks, {r.batches} batches"
        if not r.problems:
            if r.checksummed:
                return f"VERDICT: OK: footer, index crc, data crc and {checked} check out"
            return (f"VERDICT: OK as far as can be checked: AutoMQ object (no checksums); the structure of "
                    f"{checked} checks out (a changed payload byte cannot be seen)")
        first = primary_problem(r.problems)
        where = (f" in block [{first.block_position}, {first.block_end}) of stream {first.stream_id} offsets "
                 f"[{first.start_offset}, {first.end_offset})" if first.block_position is not None else "")
        return f"VERDICT: DAMAGED: {plural(len(r.problems), 'problem')}; first at byte {first.position}{where}: {first.message}"


def resolve(target: str, store_url: str | None, endpoint_url: str | None, namespace: str | None = None, *,
            s3: S3Settings | None = None):
    """(store, key, known) for an object id, a key (full or relative to the store prefix), or a
    local file; ``known``: the store's manifest entry that names it (live or replaced, so it must be
    a valid object; a live one gives its size), else None. A file given by its path inside a local
    store (``<store>/<rev-hex>/<namespace>/<id>``) is looked up in that store's manifest too. ``s3``:
    open_store's S3 settings."""
    from walctl.errors import CorruptionError

    store, key, in_store = _resolve(target, store_url, endpoint_url, namespace, s3)
    known = None
    if in_store:
        from walctl.store import manifest as mf

        try:
            doc = mf.load_latest(store)
        except CorruptionError:
            if store_url is not None:
                raise
            doc = mf.empty_manifest()  # a file given by its path is still inspected when the manifest is not
        known = doc.known_object(key)
    return store, key, known


def _resolve(target: str, store_url: str | None, endpoint_url: str | None, namespace: str | None = None,
             s3: S3Settings | None = None):
    from walctl.store import manifest as mf
    from walctl.store import open_store

    if store_url is None:
        if not os.path.exists(target):
            raise (UsageError if target.isdigit() else NotFoundError)(
                "no such file" if not target.isdigit() else "an object id needs --store", where=target,
                hint="TARGET is an object file, or an object id or key with --store URL")
        path = os.path.abspath(target)
        parts = path.split(os.sep)
        if len(parts) >= 5 and parts[-1].isdigit() and parts[-3] == f"{int(parts[-1]):08x}"[::-1]:
            # <store>/<rev-hex>/<namespace>/<id>: open the store, so a composite's members are found
            # and its manifest says whether the object is one it names
            return open_store(os.sep.join(parts[:-3]), create=False), "/".join(parts[-3:]), True
        return open_store(os.path.dirname(path), create=False), os.path.basename(path), False
    store = open_store(store_url, endpoint_url=endpoint_url, create=False, s3=s3)  # a reader never creates a store
    if target.isdigit():
        doc = mf.load_latest(store)
        object_id = int(target)
        entry = doc.entry(object_id)
        if entry is not None:
            return store, entry.key, True
        # Not in a walctl manifest (an AutoMQ bucket has none): look under the namespace given, else
        # walctl's "default" and AutoMQ's "DEFAULT" (ObjectUtils' namespace).
        spaces = [namespace] if namespace else [mf.DEFAULT_NAMESPACE, AUTOMQ_NAMESPACE]
        for space in spaces:
            key = mf.object_key(object_id, space)
            try:
                store.size(key)
                return store, key, True
            except NotFoundError:
                continue
        return store, mf.object_key(object_id, spaces[0]), True
    key = target
    if store_url.startswith("s3://"):
        bucket_and_prefix = store_url[len("s3://"):].rstrip("/")
        parts = bucket_and_prefix.split("/", 1)
        prefix = parts[1] + "/" if len(parts) == 2 else ""
        if key.startswith("s3://"):
            key = key[len("s3://"):].split("/", 1)[1] if "/" in key[len("s3://"):] else ""
        if prefix and key.startswith(prefix):
            key = key[len(prefix):]
    return store, key.lstrip("/"), True


DAMAGED_HINT = ("the manifest names it: its data is not readable from here; restore the object, or re-upload "
                "its records if the WAL still holds them")


def truncation(found_bytes: int, expected_bytes: int) -> str:
    """How an object of a size other than the manifest's is named: ``truncated: 5,000,000 of
    9,541,322 bytes``, or ``9,541,400 bytes, 78 more than the manifest's 9,541,322``."""
    if found_bytes < expected_bytes:
        return f"truncated: {found_bytes:,} of {expected_bytes:,} bytes"
    return f"{found_bytes:,} bytes, {found_bytes - expected_bytes:,} more than the manifest's {expected_bytes:,}"


def inspect(store: Store, key: str, *, deep: bool = False, known: bool = False, expected_size: int | None = None,
            progress=None) -> InspectResult:
    """Footer and index (and with ``deep`` every byte) of the object at ``key``. ``progress(done,
    total)``, if given, is called as ``deep`` reads the object (bytes read of its size).

    ``known``: the manifest names the object, so a footer that does not parse is damage, not "not
    ours"; ``expected_size``: the manifest's size of it, so a shorter object is named truncated.
    With ``deep`` such damage is a problem of the result (its verdict says DAMAGED), not an error.

    Raises:
        NotFoundError: no such object, or not an object of this format (unless ``known``).
        CorruptionError: a failed check; also a bad footer or another size than ``expected_size``
            of an object the manifest names (without ``deep``).
    """
    from walctl.errors import CorruptionError
    from walctl.format import object as obj

    before = store.stats.get
    tail, size = store.read_tail(key, TAIL_READ_BYTES)
    short = None
    if expected_size is not None and size != expected_size:
        short = obj.Problem(min(size, expected_size), truncation(size, expected_size), "truncated")
        if not deep:
            raise CorruptionError(f"live object {short.message}", where=key, offset=short.position,
                                  expected=expected_size, found=size, hint=DAMAGED_HINT)
    if short is None and obj.is_composite(tail):
        return _inspect_composite(store, key, tail, size, before, deep=deep)
    try:
        footer, entries = obj.parse_tail(tail, size)
        if entries is None:
            index = store.read_range(key, footer.index_start_position,
                                     footer.index_start_position + footer.index_block_length)
            entries = obj.decode_index(index, footer, base_position=footer.index_start_position)
    except FormatError as exc:
        not_ours = isinstance(exc, (BadMagicError, ZeroedError, TruncatedError))
        if deep and (known or short is not None or not not_ours):
            result = InspectResult(key, size, None, [], 0, deep=True)  # no footer: the verdict says why
            return _verify_all(store, result, before, progress, short)
        if not not_ours:
            raise
        if known:  # the manifest says this is one of ours: a bad footer is damage, not "not ours"
            raise CorruptionError(f"live object has a damaged footer ({exc})", where=key, offset=exc.offset,
                                  hint=DAMAGED_HINT) from exc
        raise NotFoundError(f"not a walctl or AutoMQ object ({exc})", where=key,
                            hint="TARGET must be an object that walctl or AutoMQ wrote") from exc
    result = InspectResult(key, size, footer, entries, store.stats.get - before, deep=deep)
    if footer.version == 0:
        result.notes.append("AutoMQ object (footer version 0): it carries no checksums to verify")
    if deep:
        _verify_all(store, result, before, progress, short)
    return result


def _verify_all(store: Store, result: InspectResult, before: int, progress, short=None) -> InspectResult:
    """--deep: read every byte of the object (ranged GETs of DEEP_READ_BYTES) and verify it; ``short``,
    a size other than the manifest's, leads the problems."""
    from walctl.format import object as obj

    size = result.size_bytes
    data = bytearray()
    for start in range(0, size, DEEP_READ_BYTES):
        data += store.read_range(result.key, start, min(size, start + DEEP_READ_BYTES))
        if progress is not None:
            progress(len(data), size)
    report = obj.verify_report(bytes(data))
    if short is not None:
        report = obj.VerifyReport([short, *report.problems], report.entries, report.blocks, report.batches,
                                  report.checksummed)
    result.report = report
    result.problems = report.problems
    result.reads = store.stats.get - before
    return result


def verify_streamed(store: Store, key: str, footer, entries, *, run_bytes: int = DEEP_READ_BYTES, progress=None):
    """Every block of an object checked against its index entry, and the footer's data crc, reading the
    data region front to back in ranged GETs of whole index entries, about ``run_bytes`` each, so that
    one run is all it holds (an object of any size in bounded memory). The checks of the data that
    ``verify_report`` makes (it needs the whole object): block and batch headers, contiguous offsets,
    counts, bytes no entry covers, the data crc. ``footer`` and ``entries``: the decoded tail (the index
    already checked). Problems in a block name its index entry's blocks. Returns a VerifyReport.
    ``progress(done, total)``: data bytes read so far."""
    from walctl.format import checks
    from walctl.format import object as obj
    from walctl.format.crc import crc32c

    end = footer.index_start_position
    ordered = sorted(entries, key=lambda e: e.block_position)
    problems: list = []
    crc = blocks = batches = 0
    pos = covered = i = 0
    while pos < end:
        run = []
        while i < len(ordered) and (not run or ordered[i].block_end - pos <= run_bytes):
            run.append(ordered[i])
            i += 1
        stop = run[-1].block_end if run else min(end, pos + run_bytes)
        buf = store.read_range(key, pos, stop)
        if len(buf) < stop - pos:
            problems.append(obj.Problem(pos + len(buf), f"object ends at byte {pos + len(buf)}, inside its data "
                                        f"region [0, {end})", "TruncatedError"))
            return obj.VerifyReport(problems, len(entries), blocks, batches, footer.checksummed)
        crc = crc32c(buf, crc)
        for e in run:
            if e.block_position > covered:
                problems.append(obj.Problem(covered, f"bytes [{covered}, {e.block_position}) are not covered by "
                                            "any index entry", "uncovered"))
            covered = e.block_end
            try:
                with checks.relocated(pos):
                    for block in obj._decode_entry_blocks(buf, e, pos, copy=False):
                        blocks += 1
                        batches += len(block)
            except FormatError as exc:
                p = obj.Problem.of(exc)
                problems.append(obj.Problem(p.position, p.message, p.kind, e.block_position, e.block_end,
                                            e.stream_id, e.start_offset, e.end_offset))
        pos = stop
        if progress is not None:
            progress(pos, end)
    if covered < end:
        problems.append(obj.Problem(covered, f"bytes [{covered}, {end}) are not covered by any index entry",
                                    "uncovered"))
    if footer.checksummed:
        try:
            checks.crc(footer.data_crc, crc, 0, f"object data [0, {end})")
        except FormatError as exc:
            problems.append(obj.Problem.of(exc))
    problems.sort(key=lambda p: p.position)
    return obj.VerifyReport(problems, len(entries), blocks, batches, footer.checksummed)


def _inspect_composite(store: Store, key: str, tail: bytes, size: int, before: int, *, deep: bool) -> InspectResult:
    """An AutoMQ composite object: its members and the index entries that point into them; with
    ``deep``, every entry's blocks read from its member and checked against the entry."""
    from walctl.errors import CorruptionError
    from walctl.format import object as obj

    whole = tail if len(tail) == size else store.read_range(key, 0, size)
    try:
        comp = obj.decode_composite(whole, size)
    except FormatError as exc:
        raise CorruptionError(f"damaged AutoMQ composite object ({exc})", where=key, offset=exc.offset) from exc
    footer = obj.Footer(comp.index_start_position, comp.index_block_length, obj.VERSION_AUTOMQ)
    result = InspectResult(key, size, footer, comp.entries, store.stats.get - before, deep=deep, composite=comp)
    members = ", ".join(f"{m.object_id} ({member_key(key, m.object_id)})" for m in comp.members)
    result.notes.append(f"AutoMQ composite object: no data of its own; its {len(comp.entries)} index entries "
                        f"point into {plural(len(comp.members), 'member object')}: {members}")
    if deep:
        problems: list = []
        blocks = batches = 0
        for member, entry in comp.placed_entries():
            mkey = member_key(key, member.object_id)
            try:
                data = store.read_range(mkey, entry.block_position, entry.block_end)
                for block in obj._decode_entry_blocks(data, entry, entry.block_position):
                    blocks += 1
                    batches += len(block)
            except NotFoundError:
                problems.append(obj.Problem(entry.block_position, f"member object {member.object_id} ({mkey}) "
                                            "is missing", "missing", stream_id=entry.stream_id,
                                            start_offset=entry.start_offset, end_offset=entry.end_offset))
            except FormatError as exc:
                p = obj.Problem.of(exc)
                problems.append(obj.Problem(p.position, f"member object {member.object_id} ({mkey}): {p.message}",
                                            p.kind, entry.block_position, entry.block_end, entry.stream_id,
                                            entry.start_offset, entry.end_offset))
        result.report = obj.VerifyReport(problems, len(comp.entries), blocks, batches, False)
        result.problems = problems
        result.reads = store.stats.get - before
    return result


def primary_problem(problems):
    """The problem to lead with: a truncation (it explains the others); then one located in a block,
    which beats the data crc's "somewhere in [0, N)"."""
    truncated = [p for p in problems if p.kind == "truncated"]
    if truncated:
        return truncated[0]
    located = [p for p in problems if p.block_position is not None]
    return located[0] if located else problems[0]


def iter_records(store: Store, key: str, entries, *, stream: int | None = None, run_bytes: int = DEEP_READ_BYTES,
                 composite=None):
    """Yield (entry, PlacedBatch) for every batch of the object's blocks (of ``stream`` only, if given),
    block by block, reading one ranged GET per run of physically adjacent blocks (at most ``run_bytes``,
    unless one index entry is larger). A damaged block raises its FormatError (object positions).
    For a ``composite`` object the blocks are read from its member objects."""
    groups = [(key, entries)]
    if composite is not None:
        groups = [(member_key(key, m.object_id), composite.entries[m.block_start_index:m.block_end_index])
                  for m in composite.members]
    for group_key, group in groups:
        yield from _iter_group(store, group_key, group, stream, run_bytes)


def _iter_group(store: Store, key: str, entries, stream: int | None, run_bytes: int):
    from walctl.format import object as obj

    wanted = sorted((e for e in entries if stream is None or e.stream_id == stream), key=lambda e: e.block_position)
    i = 0
    while i < len(wanted):
        run = [wanted[i]]
        while (i + len(run) < len(wanted) and wanted[i + len(run)].block_position == run[-1].block_end
               and run[-1].block_end + wanted[i + len(run)].block_size - run[0].block_position <= run_bytes):
            run.append(wanted[i + len(run)])
        i += len(run)
        data = store.read_range(key, run[0].block_position, run[-1].block_end)
        for entry in run:
            for placed in obj.iter_placed(data, entry, base_position=run[0].block_position):
                yield entry, placed


def problem_json(p) -> dict:
    return {"type": "problem", "position": p.position, "message": p.message, "kind": p.kind,
            "block_position": p.block_position, "block_end": p.block_end, "stream_id": p.stream_id,
            "start_offset": p.start_offset, "end_offset": p.end_offset, "explanation": p.explanation}


def member_key(composite_key: str, object_id: int) -> str:
    """Where a composite object's member lives: AutoMQ's ObjectUtils.genKey(0, id) in the composite's
    own namespace (and under the same store prefix)."""
    parts = composite_key.split("/")
    namespace = parts[-2] if len(parts) >= 3 else DEFAULT_NAMESPACE
    prefix = "/".join(parts[:-3])
    key = object_key(object_id, namespace)
    return f"{prefix}/{key}" if prefix else key


def index_rows(entries) -> list[dict]:
    return [{"type": "index_entry", "stream_id": e.stream_id, "start_offset": e.start_offset,
             "end_offset": e.end_offset, "record_count": e.record_count, "block_position": e.block_position,
             "block_size_bytes": e.block_size} for e in entries]
