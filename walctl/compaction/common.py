"""What SO compaction and Force Split share: index reads, the fence and the commit (pacing: walctl.device.pacing).

The commit protocol is SSO compaction's (docs/FORMATS.md 4-5): one commit bumps
``compactor_epoch`` and prepares the output ids, the objects are written, one commit
replaces the inputs, refused unless the epoch is still ours, every input is still live
and the prepared ids were not collected. A kill before that commit leaves only prepared
ids (and their objects), which gc removes after their expiry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import time
from dataclasses import dataclass

from walctl.device.pacing import Pacer
from walctl.errors import CorruptionError, RefusedError
from walctl.format.crc import crc32c
from walctl.format.object import FOOTER_SIZE, Footer, IndexEntry
from walctl.store import manifest as mf

if TYPE_CHECKING:
    from walctl.store.base import Store

CRC_READ_BYTES = 16 << 20  # ranged GETs that only feed a checksum read this much at a time


def expected_seconds(read_bytes: int, write_bytes: int, read_rate_bps: float | None,
                     write_rate_bps: float | None) -> float | None:
    """The run's duration under its budgets (the slower of the two), or None when unlimited."""
    times = [n / r for n, r in ((read_bytes, read_rate_bps), (write_bytes, write_rate_bps)) if r]
    return round(max(times), 3) if times else None


@dataclass(frozen=True)
class ObjectIndex:
    footer: Footer
    entries: tuple[IndexEntry, ...]

    @property
    def data_size(self) -> int:
        return self.footer.index_start_position


def read_index(store: Store, obj: mf.LiveObject) -> ObjectIndex:
    """Footer and index of a live object, in one ranged read of exactly its tail.

    The manifest gives the object's size and its streams' bytes (the data region), so the
    read asks for the index and footer only and never for data bytes (a second read fetches
    the index if the manifest's figures were off). Index crc checked (walctl footers).
    Raises CorruptionError: a damaged tail, or a size other than the manifest's.
    """
    from walctl.errors import FormatError
    from walctl.format.object import decode_index, parse_tail, tail_length_hint

    key = obj.key
    data_bytes = sum(r.bytes for r in obj.ranges)
    length = obj.size - data_bytes
    if length < FOOTER_SIZE:
        length = tail_length_hint(object_size=obj.size)
    tail, size = store.read_tail(key, length)
    if size != obj.size:
        raise CorruptionError(f"object is {size} bytes, the manifest says {obj.size}", where=key)
    try:
        footer, entries = parse_tail(tail, size)
        if entries is None:
            index = store.read_range(key, footer.index_start_position,
                                     footer.index_start_position + footer.index_block_length)
            entries = decode_index(index, footer, base_position=footer.index_start_position)
    except FormatError as exc:
        raise CorruptionError(f"live object has a damaged footer or index ({exc})", where=key) from exc
    return ObjectIndex(footer, tuple(entries))


def recorded_crc_problem(obj: mf.LiveObject, index: ObjectIndex) -> str | None:
    """What is wrong when the crcs the manifest records for an object's ranges (ObjectRange ``crc``)
    do not combine to its footer's data crc (every range recorded, a walctl footer, the ranges
    tiling its data region); None when they agree or cannot be compared. No data is read: force
    split copies a range by its recorded crc, so check and split refuse one that disagrees."""
    from walctl.format.crc import crc32c_combine

    if not obj.ranges or not index.footer.checksummed or any(r.crc is None for r in obj.ranges):
        return None
    if sum(r.bytes for r in obj.ranges) != index.data_size:
        return None
    crc = 0
    for r in obj.ranges:  # streams lie back to back in stream order (the index's order)
        crc = crc32c_combine(crc, r.crc, r.bytes)
    if crc == index.footer.data_crc:
        return None
    return (f"the crcs the manifest recorded for its ranges combine to {crc:#010x}, its footer's data crc is "
            f"{index.footer.data_crc:#010x}: a range's recorded crc or the footer is wrong")


def range_crc(store: Store, key: str, start: int, end: int, read_pacer: Pacer | None = None) -> int:
    """crc32c of bytes [start, end) of an object, read in ranged GETs of at most 16 MiB, never
    all held at once."""
    value, pos = 0, start
    while pos < end:
        stop = min(end, pos + CRC_READ_BYTES)
        data = store.read_range(key, pos, stop)
        if len(data) != stop - pos:
            raise CorruptionError(f"object shorter than its index says ({pos + len(data)} < {stop})", where=key)
        value = crc32c(data, value)
        if read_pacer is not None:
            read_pacer.paid(len(data))
        pos = stop
    return value


def tail_bytes(entries: list[IndexEntry], data_size: int, data_crc: int) -> bytes:
    """IndexBlock + walctl (version 1) footer for an object whose data region is ``data_size``
    bytes with checksum ``data_crc``."""
    index = b"".join(e.encode() for e in entries)
    footer = Footer(data_size, len(index), index_crc=crc32c(index), data_crc=data_crc)
    return index + footer.encode()


def fence_and_prepare(store: Store, count: int, namespace: str, command: str) -> tuple[int, list[mf.PreparedId]]:
    """Bump ``compactor_epoch`` (fencing older compactors) and prepare ``count`` output ids."""
    state: dict = {}

    def start(m: mf.Manifest) -> None:
        state["epoch"] = m.fence()
        state["prepared"] = m.prepare(count, namespace)

    mf.commit(store, start, command=f"{command} (fence + prepare)")
    return state["epoch"], state["prepared"]


def commit_replacement(store: Store, *, epoch: int, inputs: list[mf.LiveObject], prepared: list[mf.PreparedId],
                       made: list[dict],
                       command: str, sso_order_id: int | None = None, also=None) -> int:
    """Replace ``inputs`` by ``made`` (each {key, kind, size, ranges}) in one commit; returns its number.

    Every compaction level commits through here. ``sso_order_id``: the order id a new SSO takes
    (SSO compaction gives it its oldest input's, so it sorts where they did); an SO takes its own
    id. ``also(manifest)``: a further change made in the same commit (retention starts).

    Refused (RefusedError, nothing committed) when another compactor started since
    ``fence_and_prepare``, an input is no longer live, or gc collected a prepared id.
    """
    input_ids = {o.id for o in inputs}
    by_key = {p.key: p.id for p in prepared}
    data_time = max((o.data_time or 0 for o in inputs), default=0)

    def finish(m: mf.Manifest) -> None:
        if m.compactor_epoch != epoch:
            raise RefusedError(f"fenced: another compactor started (epoch {epoch} -> {m.compactor_epoch}); "
                               "this run commits nothing", where=store.url, hint="its objects are left for gc")
        gone = sorted(input_ids - m.live_ids())
        if gone:
            raise RefusedError(f"input objects {gone} are no longer live; this run commits nothing",
                               where=store.url, hint="rerun compact")
        ours = set(by_key.values())
        if not ours <= m.prepared_ids():
            raise RefusedError("the prepared output ids were collected by gc during the run",
                               where=store.url, hint="rerun compact with a longer gc --grace")
        outputs = []
        for out in made:
            oid = by_key[out["key"]]  # not a manifest entry
            order_id = sso_order_id if out["kind"] == "SSO" and sso_order_id is not None else oid  # not a manifest entry
            outputs.append(mf.LiveObject(oid, out["key"], out["kind"], out["size"],  # not a manifest entry
                                         [mf.ObjectRange.from_json(r) for r in out["ranges"]],  # not a manifest entry
                                         order_id=order_id, data_time=data_time))
        m.replace(input_ids, outputs, reserved=ours, now=time.time())
        if also is not None:
            also(m)

    return mf.commit(store, finish, command=command).number


def check_made(plan, made: list[dict]) -> None:
    """The written objects must hold exactly what the plan said (no double, no hole)."""
    want = sorted((sid, s, e) for out in plan.outputs for (sid, s, e, _) in out.streams)
    got = sorted((r["stream_id"], r["start"], r["end"]) for m in made for r in m["ranges"])  # not a manifest entry
    if want != got:
        raise CorruptionError("compaction outputs do not match the plan; nothing committed",
                              hint=f"planned {len(want)} stream ranges, made {len(got)}")
