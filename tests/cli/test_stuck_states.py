"""Issue 14: no state a crash or a bad option can leave the pipeline stuck in.

Each test drives the CLI through the state and then on to a drained WAL (every
record uploaded once, nothing live left), on a file and, where the device matters,
on a loop device.
"""

from __future__ import annotations

import json
import struct

import pytest

from walctl.device import open_device
from walctl.format.crc import crc32c
from walctl.format.header import HEADERS_SIZE, SLOT_SIZE, WalHeader
from walctl.format.seal import SealDescriptor
from walctl.store import manifest as mf
from walctl.store import open_store
from walctl.wal.headers import decode_slots
from walctl.wal.lifecycle import open_writer
from walhelpers import mark_ungraceful

INT64_MAX = (1 << 63) - 1


def _device_write(path: str, position: int, data: bytes) -> None:
    """Damage the device at a physical position through the device layer (aligned, O_DIRECT-safe)."""
    from walctl.device.buffers import aligned_buffer

    start = position - position % 4096
    end = -(-(position + len(data)) // 4096) * 4096
    dev = open_device(path, writable=True)
    try:
        buf = aligned_buffer(end - start)
        dev.pread_into(start, buf)
        buf[position - start:position - start + len(data)] = data
        dev.pwrite(start, buf)
    finally:
        dev.close()


def _crash_hole(cli, dev: str) -> None:
    """The issue's recipe: three one-record blocks of stream 3 (offsets 0, 4096, 8192); the block at
    4096 lost and the newest header slot ungraceful (what a power loss with it in flight leaves).
    The headers are those of the crash: the last ones written before the lost block (a crashed
    writer writes none after), so no durable point (checkpoint, recorded end) covers it. Zeroing
    a block below them would be corruption, which every command refuses (see below)."""
    res = cli("append", dev, "--stream", "3", "rec-a")
    assert res.exit_code == 0, res
    headers = _device_read(dev, 0, HEADERS_SIZE)
    for data in ("rec-b", "rec-c"):
        res = cli("append", dev, "--stream", "3", data)
        assert res.exit_code == 0, res
    _device_write(dev, HEADERS_SIZE + 4096, bytes(4096))
    _device_write(dev, 0, headers)
    mark_ungraceful(dev)


def _device_read(path: str, position: int, length: int) -> bytes:
    from walctl.device.buffers import aligned_buffer

    dev = open_device(path, writable=False)
    try:
        buf = aligned_buffer(length)
        dev.pread_into(position, buf)
        return bytes(buf)
    finally:
        dev.close()


def _records(cli, dev: str) -> list[dict]:
    res = cli("recover", dev, "--json", "--payload", "text")
    assert res.exit_code == 0, res
    return [line for line in res.json_lines() if line["type"] == "record"]


def _stored(store_dir) -> dict[int, list[tuple[int, bytes]]]:
    from storehelpers import read_back

    return read_back(open_store(str(store_dir)))


@pytest.fixture(params=["file", "loop"])
def wal_dev(request, tmp_path, cli, loop_device):
    """A 1 MiB WAL on a file or on a loop device (init --capacity 1MiB)."""
    path = str(tmp_path / "wal.img") if request.param == "file" else loop_device(size_bytes=1 << 20)
    res = cli("init", path, "--capacity", "1MiB", *(["--force"] if request.param == "loop" else []))
    assert res.exit_code == 0, res
    return path


def test_sealed_crash_hole_stays_explained_and_drains(cli, wal_dev, tmp_path):
    """Item 1: after sealing, the gap the crash made is still explained; upload carries it forward."""
    store = tmp_path / "store"
    _crash_hole(cli, wal_dev)
    res = cli("append", wal_dev, "--stream", "3", "rec-d")
    assert res.exit_code == 0, res
    assert "sealed 1 damaged range" in res.stderr

    # The evidence is in the sealing padding record's body, byte for byte as FORMATS.md 1.5 says.
    dev = open_device(wal_dev, writable=False)
    try:
        from walctl.device.buffers import aligned_buffer

        buf = aligned_buffer(4096)
        dev.pread_into(HEADERS_SIZE + 4096, buf)
    finally:
        dev.close()
    magic, length, body_offset, body_crc, _ = struct.unpack_from(">IIqII", buf)
    assert (magic, length, body_offset, body_crc) == (0x76543210, 4096 - 24, 4096 + 24, 0)
    seal = SealDescriptor.decode(bytes(buf), 24)
    assert (seal.hole_start, seal.hole_end, seal.streams) == (4096, 8192, ((3, 1, 2),))
    assert seal.sealed_at_ns > seal.crashed_header_ns > 0

    # recover and status say why the gap exists and that nothing is to be done.
    lines = cli("recover", wal_dev, "--json").json_lines()
    holes = [x for x in lines if x["type"] == "sealed_hole"]
    gaps = [x for x in lines if x["type"] == "stream_gap"]
    assert [(h["hole_start"], h["hole_end"], h["streams"]) for h in holes] == \
        [(4096, 8192, [{"stream_id": 3, "from": 1, "to": 2}])]
    assert [(g["stream_id"], g["from"], g["to"], g["cause"], g["sealed"]) for g in gaps] == [(3, 1, 2, "crash", True)]
    assert "sealed at" in gaps[0]["explanation"] and "nothing to do" in gaps[0]["explanation"]
    assert lines[-1]["unexplained_stream_gaps"] == 0
    status = cli("status", wal_dev, "--json")  # a clean close: answered from the checkpoint, no scan
    assert status.exit_code == 0, status
    assert status.json_lines()[-1]["sealed_holes"] is None  # unknown without a scan, not "none"
    status = cli("status", wal_dev, "--scan", "--json")
    assert status.exit_code == 0, status
    out = status.json_lines()[-1]
    assert out["sealed_holes"][0]["sealed_at_ns"] == seal.sealed_at_ns
    assert out["stream_gaps"][0]["cause"] == "crash"
    human = cli("status", wal_dev, "--scan")
    assert "sealed hole" in human.stdout and "lost in a crash" in human.stdout

    # upload (once refused with exit 3 forever) carries the gap forward: data after it in its own SO.
    res = cli("upload", wal_dev, "--store", store, "--json")
    assert res.exit_code == 0, res
    result = res.json_lines()[-1]
    assert [(g["stream_id"], g["from"], g["to"], g["cause"]) for g in result["gaps"]] == [(3, 1, 2, "crash")]
    assert sorted((r["start"], r["end"]) for o in result["objects"] for r in o["streams"]) == [(0, 1), (2, 4)]
    assert "lost in a crash" in res.stderr
    doc = mf.load_latest(open_store(str(store)))
    assert [(g.stream_id, g.from_offset, g.to_offset, g.cause, g.sealed) for g in doc.stream_gaps] == \
        [(3, 1, 2, "crash", True)]
    assert _stored(store) == {3: [(0, b"rec-a"), (2, b"rec-c"), (3, b"rec-d")]}
    assert _records(cli, wal_dev) == []  # drained

    # And the pipeline keeps going.
    assert cli("append", wal_dev, "--stream", "3", "rec-e").exit_code == 0
    assert cli("upload", wal_dev, "--store", store).exit_code == 0
    assert _stored(store)[3][-1] == (4, b"rec-e")
    assert _records(cli, wal_dev) == []


def test_a_lost_block_below_the_durable_points_is_corruption_the_writer_will_not_seal(cli, tmp_path):
    """A block zeroed after the clean close that covered it (the checkpoint's log end is past it):
    its records were acknowledged. recover, upload and append all call it corruption (exit 3); the
    writer does not seal it as a crash hole (that hid acknowledged records as "never
    acknowledged", and upload then trimmed them away), and writes nothing."""
    dev = str(tmp_path / "wal.img")
    assert cli("init", dev, "--capacity", "1MiB").exit_code == 0
    for data in ("rec-a", "rec-b", "rec-c"):
        assert cli("append", dev, "--stream", "3", data).exit_code == 0
    _device_write(dev, HEADERS_SIZE + 4096, bytes(4096))
    mark_ungraceful(dev)
    before = open(dev, "rb").read()
    res = cli("append", dev, "--stream", "3", "rec-d")
    assert res.exit_code == 3 and "1 finding a crash does not explain" in res.stderr, res
    assert "below the checkpoint's log end" in res.stderr, res
    assert open(dev, "rb").read() == before
    assert cli("recover", dev).exit_code == 3
    assert cli("upload", dev, "--store", tmp_path / "store").exit_code == 3
    assert open(dev, "rb").read() == before


def test_crash_hole_before_sealing_uploads_too(cli, tmp_path):
    """Before the next writer opens, the hole finding itself explains the gap (as before this issue)."""
    dev = str(tmp_path / "wal.img")
    assert cli("init", dev, "--capacity", "1MiB").exit_code == 0
    _crash_hole(cli, dev)
    res = cli("upload", dev, "--store", tmp_path / "store", "--json")
    assert res.exit_code == 0, res
    gap = res.json_lines()[-1]["gaps"][0]
    assert (gap["cause"], gap["sealed"], gap["hole_start"]) == ("crash", False, 4096)


def test_gap_at_the_store_boundary_after_a_crash_is_explained(cli, tmp_path):
    """The records before the hole were uploaded (and trimmed) already; the first record after it
    continues the stream with a gap against the store: the sealed hole still explains it."""
    dev, store = str(tmp_path / "wal.img"), tmp_path / "store"
    assert cli("init", dev, "--capacity", "1MiB").exit_code == 0
    assert cli("append", dev, "--stream", "3", "rec-a").exit_code == 0
    assert cli("upload", dev, "--store", store).exit_code == 0  # uploads rec-a, trims to it
    headers = _device_read(dev, 0, HEADERS_SIZE)  # (the crash's headers: see _crash_hole)
    for data in ("rec-b", "rec-c"):
        assert cli("append", dev, "--stream", "3", data).exit_code == 0  # blocks at 4096 and 8192
    _device_write(dev, HEADERS_SIZE + 4096, bytes(4096))
    _device_write(dev, 0, headers)
    mark_ungraceful(dev)
    assert cli("append", dev, "--stream", "3", "rec-d").exit_code == 0  # seals the hole
    res = cli("upload", dev, "--store", store, "--json")
    assert res.exit_code == 0, res
    assert [(g["from"], g["to"], g["cause"]) for g in res.json_lines()[-1]["gaps"]] == [(1, 2, "crash")]
    assert _stored(store) == {3: [(0, b"rec-a"), (2, b"rec-c"), (3, b"rec-d")]}
    assert _records(cli, dev) == []


def test_unexplained_gap_stops_upload_until_accepted(cli, tmp_path):
    """A gap no crash explains (a wrong --base-offset) stops upload (exit 3) with the way out,
    --accept-gap, which uploads everything and records the acceptance in the manifest."""
    dev, store = str(tmp_path / "wal.img"), tmp_path / "store"
    assert cli("init", dev, "--capacity", "1MiB").exit_code == 0
    assert cli("append", dev, "--stream", "5", "a").exit_code == 0
    assert cli("append", dev, "--stream", "5", "--base-offset", "3", "b").exit_code == 0
    assert cli("append", dev, "--stream", "6", "other").exit_code == 0

    lines = cli("recover", dev, "--json").json_lines()
    gap = next(x for x in lines if x["type"] == "stream_gap")
    assert (gap["cause"], gap["accept_gap"]) == ("unexplained", "5:1-3")
    assert "--accept-gap 5:1-3" in gap["explanation"]
    assert lines[-1]["unexplained_stream_gaps"] == 1

    res = cli("upload", dev, "--store", store)
    assert res.exit_code == 3, res
    assert "no crash explains" in res.error_line() and "--accept-gap 5:1-3" in res.error_line()
    assert mf.manifest_numbers(open_store(str(store))) == []  # nothing uploaded
    # A different gap is no way around it; a malformed one is a usage error.
    assert cli("upload", dev, "--store", store, "--accept-gap", "5:1-2").exit_code == 3
    for bad in ("5:3-1", "x", "5:1", f"{1 << 63}:1-2", "5:1-99999999999999999999"):
        res = cli("upload", dev, "--store", store, "--accept-gap", bad)
        assert res.exit_code == 2, res
        assert "--accept-gap" in res.error_line()

    res = cli("upload", dev, "--store", store, "--accept-gap", "5:1-3", "--json")
    assert res.exit_code == 0, res
    assert [(g["stream_id"], g["from"], g["to"], g["cause"]) for g in res.json_lines()[-1]["gaps"]] == \
        [(5, 1, 3, "accepted")]
    doc = mf.load_latest(open_store(str(store)))
    assert [(g.stream_id, g.from_offset, g.to_offset, g.cause) for g in doc.stream_gaps] == [(5, 1, 3, "accepted")]
    assert _stored(store) == {5: [(0, b"a"), (3, b"b")], 6: [(0, b"other")]}
    assert _records(cli, dev) == []
    # An --accept-gap that matches nothing is refused, unless the manifest already holds it (a rerun).
    assert cli("upload", dev, "--store", store, "--accept-gap", "5:1-3").exit_code == 0
    res = cli("upload", dev, "--store", store, "--accept-gap", "7:1-2")
    assert res.exit_code == 2 and "matches no gap" in res.error_line()


# -- item 2: option bounds, and a bad batch that stops only itself ------------------

# A value past 2^63-1 is refused by the option's parser (naming the option and the maximum);
# one within it that a record's offsets would carry past 2^63 by the record format's bound check.
PARSER_BOUND = ("above the maximum 9223372036854775807",)


@pytest.mark.parametrize("args, bound", [
    (["--stream", "2", "--base-offset", str(INT64_MAX)], ("baseOffset", "out of bounds")),
    (["--base-offset", "99999999999999999999"], ("--base-offset", *PARSER_BOUND)),
    (["--stream", "99999999999999999999"], ("--stream", *PARSER_BOUND)),
    (["--stream", str(1 << 63)], ("--stream", *PARSER_BOUND)),
    (["--base-offset", str(INT64_MAX - 1), "--", "x", "y"], ("baseOffset", "out of bounds")),
])
def test_out_of_bounds_values_are_refused_before_anything_is_written(cli, tmp_path, args, bound):
    dev = str(tmp_path / "wal.img")
    assert cli("init", dev, "--capacity", "1MiB").exit_code == 0
    with open(dev, "rb") as f:
        before = f.read()
    extra = [] if "--" in args else ["x"]
    res = cli("append", dev, *args, *extra)
    assert res.exit_code == 2, res
    line = res.error_line()
    assert all(word in line for word in bound), line
    assert dev in line or "--" + bound[0].lstrip("-") in line  # the device, or the option at fault
    with open(dev, "rb") as f:
        assert f.read() == before  # not even a header was written


def test_the_largest_offset_fits_then_the_stream_is_full_not_the_wal(cli, tmp_path):
    dev, store = str(tmp_path / "wal.img"), tmp_path / "store"
    assert cli("init", dev, "--capacity", "1MiB").exit_code == 0
    assert cli("append", dev, "--stream", "2", "--base-offset", str(INT64_MAX - 1), "x").exit_code == 0
    res = cli("append", dev, "--stream", "2", "y")  # would end at 2^63
    assert res.exit_code == 2 and "out of bounds" in res.error_line(), res
    assert cli("append", dev, "--stream", "1", "z").exit_code == 0  # other streams go on
    assert cli("upload", dev, "--store", store).exit_code == 0
    assert _stored(store) == {1: [(0, b"z")], 2: [(INT64_MAX - 1, b"x")]}
    assert _records(cli, dev) == []


def test_a_bad_batch_written_by_hand_does_not_stop_other_streams(cli, wal_dev, tmp_path):
    """A WAL holding a batch no reader accepts (end offset 2^63, as an older walctl acknowledged):
    append, trim and upload go on for every other stream; the bad record is reported and left for
    recover; trimming past it (after saving it) drains the WAL."""
    store = tmp_path / "store"
    assert cli("append", wal_dev, "--stream", "1", "one").exit_code == 0
    bad = struct.pack(">BqqqII", 0x22, 2, 0, INT64_MAX, 1, 1) + b"!"  # covers [2^63-1, 2^63)
    opened = open_writer(wal_dev)
    bad_offset = opened.writer.append(bad)
    opened.writer.close()
    res = cli("append", wal_dev, "--stream", "1", "two")  # once refused with exit 3
    assert res.exit_code == 0, res
    res = cli("recover", wal_dev, "--json")
    assert res.exit_code == 3  # recover shows it as the finding it is
    assert [x["kind"] for x in res.json_lines() if x["type"] == "finding"] == ["bad_batch"]

    res = cli("upload", wal_dev, "--store", store, "--json")
    assert res.exit_code == 3, res
    assert "1 record holds no StreamRecordBatch" in res.error_line()
    out = res.json_lines()[-1]
    assert out["error"]["code"] == 3 and [b["offset"] for b in out["bad_records"]] == [bad_offset]
    assert out["records"] == 2 and out["trimmed_to"] == 0  # trimmed only up to the record before it
    assert f"walctl recover {wal_dev} --from {bad_offset}" in res.stderr
    assert f"walctl trim {wal_dev} {out['last_offset']}'" in res.stderr
    assert _stored(store) == {1: [(0, b"one"), (1, b"two")]}
    # It stays live for recover, and a rerun uploads nothing twice.
    assert [r["offset"] for r in _records_any(cli, wal_dev)] == [bad_offset, out["last_offset"]]
    again = cli("upload", wal_dev, "--store", store, "--json")
    assert again.exit_code == 3 and again.json_lines()[-1]["skipped_records"] == 1
    # The documented way forward: save it (recover --payload hex), then trim past it.
    saved = cli("recover", wal_dev, "--json", "--payload", "hex", "--from", bad_offset, "--to", bad_offset + 1)
    assert bytes.fromhex([x for x in saved.json_lines() if x["type"] == "record"][0]["payload"]) == bad
    assert cli("trim", wal_dev, out["last_offset"]).exit_code == 0
    assert cli("append", wal_dev, "--stream", "1", "three").exit_code == 0
    assert cli("upload", wal_dev, "--store", store).exit_code == 0
    assert _stored(store) == {1: [(0, b"one"), (1, b"two"), (2, b"three")]}
    assert _records(cli, wal_dev) == []


def _records_any(cli, dev):
    return [x for x in cli("recover", dev, "--json").json_lines() if x["type"] == "record"]


# -- item 3: the header timestamp's sign ---------------------------------------------

def test_header_timestamp_with_the_top_bit_set_is_a_damaged_slot(cli, tmp_path):
    """lastWriteTimestamp is a signed int64 >= 0: a slot with the top bit set is damaged, so
    walctl and a reader taking the field as unsigned agree on the current slot."""
    dev = str(tmp_path / "wal.img")
    assert cli("init", dev, "--capacity", "1MiB").exit_code == 0
    assert cli("append", dev, "x").exit_code == 0
    with open(dev, "rb") as f:
        raw = bytearray(f.read(HEADERS_SIZE))
    state = decode_slots(bytes(raw))
    other = 1 - state.current
    # A valid crc, a timestamp with the top bit set: unsigned it is the newest, signed the oldest.
    forged = state.header.with_(last_write_timestamp_ns=-(1 << 62), trim_offset=-1)
    raw[other * SLOT_SIZE:(other + 1) * SLOT_SIZE] = forged.encode_slot()
    (unsigned,) = struct.unpack_from(">Q", raw, other * SLOT_SIZE + 20)
    assert unsigned > state.header.last_write_timestamp_ns  # what an unsigned reader would prefer
    assert crc32c(bytes(raw[other * SLOT_SIZE:other * SLOT_SIZE + 60])) == \
        struct.unpack_from(">I", raw, other * SLOT_SIZE + 60)[0]
    with pytest.raises(Exception, match="lastWriteTimestamp"):
        WalHeader.decode(bytes(raw), other * SLOT_SIZE)
    with open(dev, "r+b") as f:
        f.write(raw)
    again = decode_slots(bytes(raw))
    assert again.current == state.current and [s.index for s in again.bad_slots] == [other]
    res = cli("status", dev, "--json")
    assert res.exit_code == 0, res
    slots = res.json_lines()[-1]["slots"]
    assert not slots[other]["valid"] and "lastWriteTimestamp" in slots[other]["error"]
    res = cli("recover", dev, "--json")
    assert res.exit_code == 0
    finding = [x for x in res.json_lines() if x["type"] == "finding"][0]
    assert finding["kind"] == "bad_header_slot" and "lastWriteTimestamp" in finding["reason"]
    # The writer carries on (it writes over the damaged slot) and the log drains.
    assert cli("append", dev, "y").exit_code == 0
    assert cli("upload", dev, "--store", tmp_path / "store").exit_code == 0
    assert _records(cli, dev) == []
    assert json.dumps(decode_slots(open(dev, "rb").read(HEADERS_SIZE)).header.to_json())


def test_init_node_id_out_of_int32_is_a_usage_error_and_creates_nothing(cli, tmp_path):
    dev = tmp_path / "wal.img"
    res = cli("init", dev, "--capacity", "1MiB", "--node-id", str(1 << 31))
    assert res.exit_code == 2, res
    assert "--node-id" in res.error_line() and "above the maximum 2147483647" in res.error_line()
    assert not dev.exists()
    assert cli("init", dev, "--capacity", "1MiB", "--node-id", str((1 << 31) - 1)).exit_code == 0


def test_bounds_callback_turns_a_bound_into_a_usage_error():
    """The validator module's typer adapter (for options that declare callback=bounds_callback(...))."""
    import typer
    from typer.testing import CliRunner

    from walctl import bounds
    from walctl.options import bounds_callback

    app = typer.Typer()

    @app.command()
    def main(stream: int = typer.Option(0, "--stream", callback=bounds_callback(bounds.stream_id))):
        print(stream)

    runner = CliRunner()
    assert runner.invoke(app, ["--stream", str(INT64_MAX)]).stdout.strip() == str(INT64_MAX)
    res = runner.invoke(app, ["--stream", str(1 << 63)])
    assert res.exit_code == 2 and "streamId (int64)" in res.output


def test_a_bad_batch_as_the_last_record_can_be_trimmed_too(cli, tmp_path):
    dev, store = str(tmp_path / "wal.img"), tmp_path / "store"
    assert cli("init", dev, "--capacity", "1MiB").exit_code == 0
    assert cli("append", dev, "--stream", "1", "one").exit_code == 0
    opened = open_writer(dev)
    bad_offset = opened.writer.append(b"\x22 not a batch at all")
    opened.writer.close()
    res = cli("upload", dev, "--store", store)
    assert res.exit_code == 3, res
    assert f"walctl trim {dev} {bad_offset}'" in res.stderr  # the way forward names the bad record itself
    assert cli("trim", dev, bad_offset).exit_code == 0
    assert cli("upload", dev, "--store", store).exit_code == 0
    assert _stored(store) == {1: [(0, b"one")]} and _records(cli, dev) == []


def _crashed_since_open(path: str) -> None:
    """The header slot a writer that opened the empty log, wrote every block and crashed leaves:
    ungraceful, nextOffset and the checkpoint's log end where it opened (0). (mark_ungraceful
    keeps the clean close's checkpoint, which says the blocks were durable: their holes would be
    corruption below its log end, not crash holes.)"""
    from walctl.device import open_device
    from walctl.format.checkpoint import Checkpoint
    from walctl.format.header import SHUTDOWN_UNGRACEFUL
    from walctl.wal.headers import read_headers, write_header

    dev = open_device(path, writable=True)
    try:
        state = read_headers(dev)
        write_header(dev, state, state.header.with_(shutdown_type=SHUTDOWN_UNGRACEFUL, next_offset=0),
                     Checkpoint(log_end=0))
    finally:
        dev.close()


def test_killed_while_sealing_the_next_writer_finishes_it(cli, tmp_path, monkeypatch):
    """Sealing patches hole after hole before the header changes: a kill after the first patch
    leaves one hole sealed (with its evidence) and one not; the next writer seals the rest."""
    from walctl.wal import crash_repair as wal_ops

    dev, store = str(tmp_path / "wal.img"), tmp_path / "store"
    assert cli("init", dev, "--capacity", "1MiB").exit_code == 0
    for data in ("r0", "r1", "r2", "r3", "r4"):  # one block each: offsets 0, 4096, ..., 16384
        assert cli("append", dev, "--stream", "3", data).exit_code == 0
    for lost in (4096, 12288):
        _device_write(dev, HEADERS_SIZE + lost, bytes(4096))
    _crashed_since_open(dev)

    real_patch, calls = wal_ops._patch, []

    def killed_after_first(device, ring, offset, data):
        if calls:
            raise KeyboardInterrupt  # the process dies here: nothing more is written
        calls.append(offset)
        real_patch(device, ring, offset, data)

    monkeypatch.setattr(wal_ops, "_patch", killed_after_first)
    with pytest.raises(KeyboardInterrupt):
        open_writer(dev)
    monkeypatch.setattr(wal_ops, "_patch", real_patch)
    lines = cli("recover", dev, "--json").json_lines()
    assert [h["hole_start"] for h in lines if h["type"] == "sealed_hole"] == [4096]
    assert [(g["from"], g["cause"], g["sealed"]) for g in lines if g["type"] == "stream_gap"] == \
        [(1, "crash", True), (3, "crash", False)]

    res = cli("append", dev, "--stream", "3", "r5")
    assert res.exit_code == 0 and "sealed 1 damaged range" in res.stderr, res
    res = cli("upload", dev, "--store", store, "--json")
    assert res.exit_code == 0, res
    assert [(g["from"], g["to"], g["sealed"]) for g in res.json_lines()[-1]["gaps"]] == [(1, 2, True), (3, 4, True)]
    assert _stored(store) == {3: [(0, b"r0"), (2, b"r2"), (4, b"r4"), (5, b"r5")]}
    assert _records(cli, dev) == []


def test_streamed_input_stops_before_the_record_that_would_overflow(cli, tmp_path):
    """--input: the count is not known up front; each record is checked before it is written, so
    the ones that fit are acknowledged and the first that would end at 2^63 is refused (exit 2)."""
    dev, source = str(tmp_path / "wal.img"), tmp_path / "in.txt"
    assert cli("init", dev, "--capacity", "1MiB").exit_code == 0
    source.write_text("a\nb\nc\n")
    res = cli("append", dev, "--stream", "2", "--base-offset", str(INT64_MAX - 2), "--input", source, "--json")
    assert res.exit_code == 2, res
    assert "out of bounds" in res.error_line()
    assert [x["base_offset"] for x in res.json_lines() if x["type"] == "record"] == [INT64_MAX - 2, INT64_MAX - 1]
    assert [r["payload"] for r in _records(cli, dev)] == ["a", "b"]
    assert cli("upload", dev, "--store", tmp_path / "store").exit_code == 0
    assert _records(cli, dev) == []


def test_a_wrong_base_offset_after_a_sealed_hole_is_not_taken_for_crash_damage(cli, tmp_path):
    """The seal descriptor lists what the crash cost; a gap made later across the same hole (a
    wrong --base-offset) is not on the list, so it stays unexplained (--accept-gap is the way)."""
    dev, store = str(tmp_path / "wal.img"), tmp_path / "store"
    assert cli("init", dev, "--capacity", "1MiB").exit_code == 0
    _crash_hole(cli, dev)
    assert cli("append", dev, "--stream", "7", "x").exit_code == 0  # seals; stream 7 lost nothing
    assert cli("append", dev, "--stream", "3", "--base-offset", "10", "late").exit_code == 0
    lines = cli("recover", dev, "--json").json_lines()
    assert [(g["from"], g["to"], g["cause"]) for g in lines if g["type"] == "stream_gap"] == \
        [(1, 2, "crash"), (3, 10, "unexplained")]
    res = cli("upload", dev, "--store", store)
    assert res.exit_code == 3 and "--accept-gap 3:3-10" in res.error_line(), res
    res = cli("upload", dev, "--store", store, "--accept-gap", "3:3-10", "--json")
    assert res.exit_code == 0, res
    assert [(g["from"], g["cause"]) for g in res.json_lines()[-1]["gaps"]] == [(1, "crash"), (3, "accepted")]
    assert _records(cli, dev) == []
