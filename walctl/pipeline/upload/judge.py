"""Upload's judgement of a scan, before anything is planned: damage no crash explains, a WAL that
is not the one the store's mark names, records skipped that the store lacks, overlaps, gaps no
crash or --accept-gap explains, an --accept-gap that matches nothing; the bad records listed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from walctl.errors import CorruptionError, UsageError
from walctl.pipeline.upload.scanindex import upload_mark

if TYPE_CHECKING:
    from walctl.pipeline.upload.state import UploadRun
    from walctl.store import manifest as mf


def judge(u: UploadRun) -> None:
    """After the scan: refuse damage, a WAL that is not the one the store knows, overlaps, gaps no
    crash or --accept-gap explains and an --accept-gap matching nothing; note the bad records."""
    from walctl.wal import gaps

    holes = gaps.holes_of(_judge_findings(u), u.scan.sealed_holes)
    accepted = {tuple(a) for a in u.opts.accept_gaps}
    _check_skipped(u)
    result = u.result
    result.skipped_records = len(u.records.skipped)
    u.streams, u.after_gaps = u.records.streams(holes, accepted, u.wal_path, result.warnings, result.gaps,
                                                damage=u.damage)
    accepted_now = [g for g in result.gaps if g["cause"] == "accepted"]  # not a manifest entry: upload's result
    used = {(g["stream_id"], g["from"], g["to"]) for g in accepted_now}  # not a manifest entry: upload's result
    recorded = {(g.stream_id, g.from_offset, g.to_offset) for g in u.doc.stream_gaps or ()}
    for sid, lo, hi in sorted(accepted - used):
        if (sid, lo, hi) in recorded:
            result.warnings.append(f"--accept-gap {sid}:{lo}-{hi}: already recorded in the manifest")
            continue
        raise UsageError(f"--accept-gap {sid}:{lo}-{hi} matches no gap in what this upload would upload",
                         where=u.wal_path, hint="'walctl recover' and 'walctl status' list the gaps; "
                                                "give exactly stream:from-to of one")


def _judge_findings(u: UploadRun) -> list:
    """Raise the damage no crash explains; list the bad records in the result. Returns the findings
    that may be crash holes (none for a live writer's log: the upload stopped before them)."""
    from walctl.wal import reader

    if u.scan.findings:  # (the verdict: only for findings to judge)
        from walctl.wal.verdict import durable_points, judge_by_durable, unexplained_error

        if not u.live and u.scan.durable is None:  # (salvage's scan judged by them already)
            judge_by_durable(u.scan.findings, durable_points(u.state))

        damage = unexplained_error(u.scan.findings, u.wal_path, framing_only=True,
                                   hint="nothing uploaded; inspect with 'walctl recover', save the intact "
                                        "records with 'walctl salvage'")
        if damage is not None and not u.opts.salvage:
            raise damage
        if damage is not None:  # salvage: the lost ranges become gaps, the bytes evidence
            u.damage = [f for f in u.scan.findings if f.kind != reader.BAD_BATCH and not f.explained]
    # A bad batch (a valid record whose body is no StreamRecordBatch) stops only itself: the
    # other records are uploaded, the WAL is not trimmed past it, 'recover' shows it.
    bad_findings = {f.offset: f for f in u.findings if f.kind == reader.BAD_BATCH}
    u.result.bad_records = [{"offset": e.offset, "body_bytes": e.body_bytes,
                             "reason": bad_findings[e.offset].reason if e.offset in bad_findings
                             else "body is not a StreamRecordBatch"} for e in u.records.bad]
    if u.live:
        return []  # a live writer's blocks in flight: the upload stopped before them
    return [f for f in u.findings if f.kind != reader.BAD_BATCH]


def _check_skipped(u: UploadRun) -> None:
    """Refuse to skip records as uploaded unless this is the WAL the manifest's mark names and the
    store holds every record skipped."""
    mark, records = u.mark, u.records
    if mark:
        _check_same_wal(mark, records.mark_found, u.scan, u.wal_path, u.node_key)
    if records.not_in_store is not None:
        uploaded = mark.offset if mark else -1
        raise CorruptionError(
            f"the store says this WAL (node {u.node_key}) is uploaded up to offset {uploaded}, but the record "
            f"at {records.not_in_store} is not in the store", where=u.wal_path, offset=records.not_in_store,
            hint="the WAL was re-initialised, or two WALs share a node id: give each WAL its own --node-id")


def _check_same_wal(mark: mf.UploadMark, found_mark: tuple[int, mf.UploadMark] | None, scan, wal_path: str,
                    node_key: str) -> None:
    """Refuse unless this WAL still holds the record it last uploaded (or was trimmed past it).

    A re-initialised WAL (or another WAL with the same node id) reuses small offsets: without
    this check its new records would be skipped as "already uploaded", then trimmed.
    """
    offset = mark.offset
    if offset < scan.start_offset:
        return  # trimmed past the mark: everything left is newer than it
    found = scan.trim_entry if scan.trim_entry is not None and scan.trim_entry.offset == offset else None
    if found is not None:
        seen = upload_mark(found) if found.batch is not None else None
    else:
        seen = found_mark[1] if found_mark is not None else None
    if seen != mark:
        raise CorruptionError(
            f"this WAL does not hold the record that node {node_key} last uploaded (offset {offset}, stream "
            f"{mark.stream_id}, stream offset {mark.base_offset}): refusing to skip or trim anything",
            where=wal_path, offset=offset,
            hint="the WAL was re-initialised, or two WALs share a node id: give each WAL its own --node-id")
