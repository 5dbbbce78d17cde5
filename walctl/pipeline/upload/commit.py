"""Upload's commit (docs/FORMATS.md 5): prepare the object ids, write the objects, make them live
and advance the WAL's uploaded offset in one manifest commit; or roll the prepared ids back.

A kill after ``prepare`` leaves prepared ids whose objects gc deletes once they expire; a kill
after ``make_live`` leaves a commit whose records the next upload skips.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterator

from walctl.errors import RefusedError
from walctl.format.object import ObjectBuilder
from walctl.store import manifest as mf

if TYPE_CHECKING:
    from walctl.store.base import Store

    from walctl.pipeline.upload.plan import PlannedObject


def prepare(store: Store, count: int, namespace: str) -> list[mf.PreparedId]:
    """Commit a manifest that reserves ``count`` object ids (and keys) in ``namespace``."""
    prepared: list[mf.PreparedId] = []

    def reserve(m: mf.Manifest) -> None:
        prepared[:] = m.prepare(count, namespace)

    mf.commit(store, reserve, command="upload (prepare)")
    return prepared


def put_objects(store: Store, plan: list[PlannedObject], prepared: list[mf.PreparedId], fetch, block_size: int,
                spools, progress) -> list[mf.LiveObject]:
    """Write each planned object under its reserved key; returns the objects made (manifest entries).

    A spooled object (written as the scan read it) gets its index and footer and is published;
    the others are built and sent a DataBlock at a time from ``fetch`` (walread._WalBatches).
    """
    made = []
    total = sum(p.data_bytes for p in plan)
    for planned, reservation in zip(plan, prepared):
        if planned.spooled:
            built = spools.publish(planned.streams[0][1].spool, reservation.key)
        else:
            built = ObjectBuilder()
            store.put_large(reservation.key, _object_chunks(built, planned, fetch, block_size))
        # bytes: the stream's span in the object (its DataBlocks, headers included)
        # crc: of those bytes, recorded so a force split can copy the range without reading it
        crcs = built.range_crcs
        ranges = [mf.ObjectRange(sid, rg.start_offset, rg.end_offset, rg.size_bytes, crcs.get(sid))
                  for sid, rg in sorted(built.ranges.items())]
        made.append(mf.LiveObject(reservation.id, reservation.key, planned.kind, built.size, ranges,
                                  order_id=reservation.id, data_time=time.time()))
        if progress is not None:
            progress(sum(p.data_bytes for p in plan[:len(made)]), total)
    return made


def _object_chunks(builder, planned: PlannedObject, fetch, block_size: int) -> Iterator[bytes]:
    """The object's bytes, a DataBlock at a time, then its index and footer."""
    for sid, seg in planned.streams:
        for start, end, batches in fetch.blocks(seg, block_size):
            data = builder.add_block(sid, start, end, batches)
            del batches  # views of the WAL's chunks: their buffers can be read into again
            yield data
    yield builder.finish()


def make_live(store: Store, made: list[mf.LiveObject], node_key: str, mark: mf.UploadMark | None,
              new_mark: mf.UploadMark | None,
              expected_ends: dict[int, int | None], gaps: list[dict], node_id: int) -> int:
    """Commit the objects ``made`` live and advance the WAL's mark from ``mark`` to ``new_mark``,
    refusing if gc collected their ids, another upload of the WAL committed first, or a stream's
    end moved; ``gaps`` (accepted or crash gaps) are recorded. Returns the commit's number."""

    def change(m: mf.Manifest) -> None:
        if not {o.id for o in made} <= m.prepared_ids():
            raise RefusedError("the prepared object ids were collected by gc during the upload",
                               where=store.url, hint="rerun upload; nothing was lost")
        if m.upload_mark(node_key) != mark:
            raise RefusedError(f"another upload of this WAL (node {node_key}) committed first",
                               where=store.url, hint="rerun upload: it skips what is already uploaded")
        for sid, end in expected_ends.items():
            now_end = stream_end(m, sid)
            if now_end != end:
                raise RefusedError(f"stream {sid} changed in the store during the upload "
                                   f"(end {end} -> {now_end})", where=store.url, hint="rerun upload")
        m.make_live(made)
        m.advance(node_key, new_mark)
        if gaps:  # why these streams have gaps: a crash, or the operator's --accept-gap
            now = time.time()
            m.add_gaps([mf.StreamGap.from_json({**g, "node_id": node_id, "time": now}) for g in gaps])

    return mf.commit(store, change, command="upload").number


def roll_back(store: Store, prepared: list[mf.PreparedId], warnings: list[str]) -> None:
    """Undo an upload that will not commit: delete the objects written for its prepared ids and
    release the ids. Best effort: what is left expires with the ids' TTL and gc deletes it."""
    ids = {p.id for p in prepared}
    try:
        for p in prepared:
            store.delete(p.key)
        mf.commit(store, lambda m: m.release(ids), command="upload (roll back)")
    except Exception as exc:  # the original error is the one to report
        warnings.append(f"could not roll back the prepared objects {sorted(ids)} ({exc}); "
                        f"they expire within an hour and gc deletes them")


def stream_end(doc: mf.Manifest, stream_id: int) -> int | None:
    """The stream's end offset in the store, or None: the store has no such stream."""
    span = doc.stream(stream_id)
    return span.end if span is not None else None
