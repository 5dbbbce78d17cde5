"""WalWriter.append_frames (issue 31): records framed and packed in C straight from the input's
bytes must write the same bytes, in the same blocks, with the same acknowledged offsets,
checkpoint and full-ring stop as append_many given the same payloads (the path it replaces)."""

from __future__ import annotations

import pytest
from test_writer_append_many import EPOCH, STREAM, many, mixed_sizes, near_lap_end, open_writer, payload, record_area
from walhelpers import new_wal, scan_file

from walctl.errors import FullError
from walctl.format import framepack
from walctl.wal.writer_blocks import FrameSpec

KiB, MiB = 1 << 10, 1 << 20
MAX_PAYLOAD = 0xFFFFFFFF - 33

pytestmark = pytest.mark.skipif(not framepack.AVAILABLE, reason="walctl.format._native is not built here")


def length_prefixed(payloads) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


def frames(writer, payloads, base: int, acks: list, *, cut: int = 64 * KiB, lines: bool = False) -> int:
    """The payloads through append_frames, fed as reads of ``cut`` bytes; returns records queued."""
    def on_frames(item):
        step = iter(payloads[item.base_offset - base:item.base_offset - base + item.count])
        offset = item.offset
        for i in range(item.count):
            acks.append((offset, item.base_offset - base + i))
            offset += 24 + 33 + len(next(step))
        assert offset - (24 + 33 + len(payloads[item.base_offset - base + item.count - 1])) == item.last_offset

    writer.on_frames = on_frames
    data = b"".join(p + b"\n" for p in payloads) if lines else length_prefixed(payloads)
    spec = FrameSpec(lines, STREAM, EPOCH, MAX_PAYLOAD)
    done, pos, fill = 0, 0, 0
    try:
        while pos < len(data):
            fill = min(len(data), fill + cut)
            while True:
                count, pos, stop, _ = writer.append_frames(data, pos, fill, spec, base + done, 1 << 40)
                done += count
                if stop == framepack.STOP_INPUT:
                    break
    finally:
        writer.close()
    return done


def run_pair(tmp_path, payloads, capacity, *, lap_room=None, **kwargs):
    out = []
    for name, fn in (("many", many), ("frames", lambda w, p, b, a: frames(w, p, b, a, **kwargs))):
        path = new_wal(tmp_path / f"{name}.img", capacity)
        if lap_room is not None:
            near_lap_end(path, lap_room)
        writer = open_writer(path)
        acks: list = []
        error = None
        try:
            fn(writer, payloads, 5, acks)
        except FullError as exc:
            error = exc
        out.append((path, acks, (writer.blocks_written, writer.bytes_written, writer.records_acked),
                    writer.checkpoint(), error))
    return out


@pytest.mark.parametrize("cut", [1000, 64 * KiB, 4 * MiB])
def test_append_frames_writes_the_same_bytes_blocks_and_acknowledgements_as_append_many(tmp_path, cut):
    payloads = [payload(i, s) for i, s in enumerate(mixed_sizes(900))]  # one record larger than a block
    (p1, acks1, stats1, cp1, _), (p2, acks2, stats2, cp2, _) = run_pair(tmp_path, payloads, 8 * MiB, cut=cut)
    assert stats1[0] > 6 and stats2 == stats1
    assert acks2 == acks1 and [i for _, i in acks2] == list(range(len(payloads)))
    assert cp2 == cp1 and cp2.streams[STREAM] == 5 + len(payloads)
    assert record_area(p2) == record_area(p1)
    entries, result = scan_file(p2)
    assert not result.findings and [e.batch.payload for e in entries] == payloads


def test_lines_pack_the_same_bytes_as_their_payloads(tmp_path):
    payloads = [payload(i, s).replace(b"\n", b"x") for i, s in enumerate(mixed_sizes(300))]
    (p1, acks1, *_), (p2, acks2, *_) = run_pair(tmp_path, payloads, 8 * MiB, lines=True, cut=777)
    assert acks2 == acks1 and record_area(p2) == record_area(p1)


def test_frames_across_the_lap_end_are_the_same_as_append_many(tmp_path):
    payloads = [payload(i, s) for i, s in enumerate(mixed_sizes(400))]
    (p1, acks1, stats1, cp1, _), (p2, acks2, stats2, cp2, _) = run_pair(tmp_path, payloads, 2 * MiB,
                                                                       lap_room=20 * KiB)
    assert acks2 == acks1 and stats2 == stats1 and cp2 == cp1
    assert record_area(p2) == record_area(p1)
    offsets = [o for o, _ in acks2]
    assert offsets[0] < 2 * MiB - 8192 < offsets[-1]


def test_a_full_wal_stops_append_frames_at_the_same_record_as_append_many(tmp_path):
    payloads = [payload(i, 1000) for i in range(3000)]  # ~3 MiB into a 1 MiB WAL
    many_run, frames_run = run_pair(tmp_path, payloads, 1 * MiB)
    assert isinstance(many_run[4], FullError) and isinstance(frames_run[4], FullError)
    assert frames_run[1] == many_run[1] and 0 < len(frames_run[1]) < len(payloads)
    assert frames_run[2] == many_run[2] and frames_run[3] == many_run[3]
    assert record_area(frames_run[0]) == record_area(many_run[0])


def test_append_frames_stops_before_a_payload_over_the_bound_and_after_max_records(tmp_path):
    path = new_wal(tmp_path / "w.img", 4 * MiB)
    writer = open_writer(path)
    writer.on_frames = lambda item: None
    data = length_prefixed([b"a" * 10, b"b" * 20, b"c" * 300, b"d"])
    spec = FrameSpec(False, STREAM, EPOCH, 100)
    try:
        count, pos, stop, next_len = writer.append_frames(data, 0, len(data), spec, 0, 1 << 40)
        assert (count, pos, stop, next_len) == (2, 38, framepack.STOP_TOO_LARGE, 300)
        count, pos, stop, _ = writer.append_frames(data, 0, len(data), FrameSpec(False, STREAM, EPOCH, 1000), 2, 1)
        assert (count, pos, stop) == (1, 14, framepack.STOP_MAX)
        # max_records reached exactly at the input's end is no stop for the bound
        count, pos, stop, _ = writer.append_frames(data, 0, 14, spec, 3, 1)
        assert (count, pos, stop) == (1, 14, framepack.STOP_INPUT)
    finally:
        writer.close()
