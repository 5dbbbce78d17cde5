"""walctl append's engine (walctl/pipeline/append.py) through its public functions, in-process on a
regular file as the WAL: records in (DATA payloads, --input in each framing), acknowledgements
out, what is on the device after, where a stream continues (first_base_offset), the refusals at
each bound with their words, the ring-full backpressure and its note, and the writer-side upload
(issue 32: the module's mutants killed here, fast)."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest

from walctl import bounds
from walctl.device.blockio import bytes_read_total, open_device
from walctl.errors import FullError, UsageError
from walctl.pipeline import append as ap
from walctl.pipeline.append import AppendHooks, AppendRequest, append, first_base_offset, largest_payload
from walctl.store import manifest as mf
from walctl.store.local import LocalStore
from walctl.wal.lifecycle import init_wal, read_wal_state
from walctl.wal.reader import run_scan

from storehelpers import put_objects

KiB, MiB = 1 << 10, 1 << 20
TOP = bounds.OFFSET_END_LIMIT - 1  # 2^63 - 1


def make(tmp_path, capacity=1 * MiB, name="wal"):
    path = str(tmp_path / name)
    init_wal(path, capacity)
    return path


def on_device(path):
    """(stream, base offset, count, epoch, payload) of every record in the log."""
    dev = open_device(path, writable=False)
    try:
        entries, _ = run_scan(dev, read_wal_state(dev, path).header)
    finally:
        dev.close()
    return [(e.batch.stream_id, e.batch.base_offset, e.batch.count, e.batch.epoch, e.batch.payload) for e in entries]


def payloads_on(path, sid=None):
    return [(b, p) for s, b, _, _, p in on_device(path) if sid is None or s == sid]


class Acks:
    """The hooks' acknowledgement callbacks: every acknowledged (offset, payload index) in order."""

    def __init__(self):
        self.offsets, self.firsts, self.frames = [], [], []

    def on_acks(self, offsets, token, first):
        self.offsets.extend(offsets)
        self.firsts.append(first)
        self.token = token

    def on_frames(self, item):
        self.frames.append((item.count, item.base_offset, item.payload_bytes))


def write_input(tmp_path, data: bytes, name="in") -> str:
    path = str(tmp_path / name)
    with open(path, "wb") as f:
        f.write(data)
    return path


# -- first_base_offset ----------------------------------------------------------------------------


def opened(streams=None, complete=False, trim=-1):
    checkpoint = None if streams is None else SimpleNamespace(streams=streams, complete=complete)
    return SimpleNamespace(checkpoint=checkpoint, header=SimpleNamespace(trim_offset=trim))


def test_a_given_base_offset_wins():
    assert first_base_offset(opened({3: 7}), 3, 0, device="d", store_url=None) == 0
    assert first_base_offset(opened({3: 7}), 3, 12, device="d", store_url=None) == 12


def test_the_log_s_end_of_the_stream():
    assert first_base_offset(opened({3: 7, 4: 9}), 3, None, device="d", store_url=None) == 7
    assert first_base_offset(opened({3: 7}, trim=100), 3, None, device="d", store_url="/nonexistent") == 7


@pytest.mark.parametrize("o", [opened(None, trim=-1), opened({4: 1}, trim=-1), opened({4: 1}, complete=True, trim=0),
                               opened({}, complete=True, trim=5)])
def test_a_stream_the_log_never_held_starts_at_0(o):
    assert first_base_offset(o, 3, None, device="d", store_url=None) == 0


@pytest.mark.parametrize("o", [opened(None, trim=0), opened(None, trim=9), opened({4: 1}, complete=False, trim=0)])
def test_a_trimmed_stream_without_a_store_is_refused(o):
    with pytest.raises(UsageError) as e:
        first_base_offset(o, 3, None, device="dev0", store_url=None)
    assert e.value.what == "stream 3 has no record left in the WAL after trimming"
    assert e.value.where == "dev0"
    assert e.value.hint == "pass --store (where it was uploaded) or --base-offset with the stream's next offset"


def test_the_store_s_end_of_the_stream(tmp_path):
    store = LocalStore(tmp_path / "store")
    put_objects(store, [[(3, 4, 10)], [(5, 2, 10)]])
    warned = []
    o = opened(None, trim=50)
    assert first_base_offset(o, 3, None, device="d", store_url=store.url, on_warning=warned.append) == 4
    assert first_base_offset(o, 5, None, device="d", store_url=store.url, on_warning=warned.append) == 2
    assert first_base_offset(o, 6, None, device="d", store_url=store.url, on_warning=warned.append) == 0
    assert warned == []


def test_a_store_that_does_not_exist_starts_the_stream_at_0_and_is_not_created(tmp_path):
    url = str(tmp_path / "nostore")
    warned = []
    assert first_base_offset(opened(None, trim=50), 3, None, device="d", store_url=url, on_warning=warned.append) == 0
    assert warned == [f"{url}: the store does not exist yet, so stream 3 starts at offset 0"]
    assert not os.path.exists(url)
    assert first_base_offset(opened(None, trim=50), 3, None, device="d", store_url=url) == 0


def test_a_store_without_a_manifest_starts_the_stream_at_0_with_a_warning(tmp_path):
    store = LocalStore(tmp_path / "store")
    store.put("other/thing", b"x")
    warned = []
    assert first_base_offset(opened(None, trim=50), 3, None, device="d", store_url=store.url,
                             on_warning=warned.append) == 0
    assert warned == [f"{store.url}: no manifest (not a walctl store, or nothing uploaded yet), so stream 3 starts "
                      "at offset 0"]
    assert first_base_offset(opened(None, trim=50), 3, None, device="d", store_url=store.url) == 0


# -- largest_payload ----------------------------------------------------------------------------


@pytest.mark.parametrize("ring, window, largest", [
    (1 * MiB, 2 * MiB, MiB - 57), (2 * MiB, 1 * MiB + 4095, MiB - 57), (1 * MiB + 100, 8 * MiB, MiB - 57),
    (4096, 4096, 4096 - 57), (4095, 8192, 0), (40, 40, 0)])
def test_largest_payload(ring, window, largest, monkeypatch):
    import walctl.wal.writer_blocks as wb

    monkeypatch.setattr(wb, "MANY_OVERHEAD", 57)
    w = SimpleNamespace(ring=SimpleNamespace(size=ring), window_cap_bytes=window)
    assert largest_payload(w) == largest


def test_largest_payload_of_a_real_wal_is_the_largest_record_it_takes(tmp_path):
    path = make(tmp_path)
    run = append(AppendRequest(path, 1, [b"x"]), AppendHooks())
    largest = largest_payload(run.writer)
    assert largest == (min(run.writer.ring.size, run.writer.window_cap_bytes) & ~4095) - 57
    other = make(tmp_path, name="wal2")
    append(AppendRequest(other, 1, [b"y" * largest]), AppendHooks())
    assert payloads_on(other) == [(0, b"y" * largest)]
    with pytest.raises(UsageError):
        append(AppendRequest(make(tmp_path, name="wal3"), 1, [b"z" * (largest + 1)]), AppendHooks())


# -- append: records in, acknowledgements out ------------------------------------------------------


def test_data_payloads_are_appended_and_acknowledged(tmp_path):
    path = make(tmp_path)
    acks = Acks()
    before = bytes_read_total()
    t0 = time.monotonic()
    run = append(AppendRequest(path, 5, [b"a", b"bb", b"ccc"]), AppendHooks(on_acks=acks.on_acks))
    assert run.device_bytes_read == bytes_read_total() - before > 0
    assert t0 <= run.started <= time.monotonic()
    assert 0 < run.seconds < 30
    assert run.next_base == 3
    assert on_device(path) == [(5, 0, 1, 0, b"a"), (5, 1, 1, 0, b"bb"), (5, 2, 1, 0, b"ccc")]
    assert acks.offsets == [0, 58, 117] and acks.firsts == [0]
    assert acks.token == ([b"a", b"bb", b"ccc"], 0)
    # the next run continues the stream from the log
    run = append(AppendRequest(path, 5, [b"d"]), AppendHooks(on_acks=acks.on_acks))
    assert run.next_base == 4 and acks.token == ([b"d"], 3)
    assert payloads_on(path)[-1] == (3, b"d")
    run = append(AppendRequest(path, 6, [b"e"], base_offset=100), AppendHooks())
    assert run.next_base == 101 and payloads_on(path, 6) == [(100, b"e")]
    assert (run.listener is not None, run.uploader, run.budget is not None, run.opened is not None) == (
        True, None, True, True)


def test_records_carry_epoch_0_on_a_new_wal(tmp_path):
    path = make(tmp_path)
    run = append(AppendRequest(path, 5, [b"a"]), AppendHooks())
    assert run.writer.header.epoch == -1  # a new WAL's: its records carry epoch 0
    assert on_device(path)[0][3] == 0
    inp = write_input(tmp_path, b"c\n")
    append(AppendRequest(path, 5, input_path=inp), AppendHooks(on_frames=lambda item: None))
    append(AppendRequest(path, 5, input_path=inp), AppendHooks())
    assert [r[3] for r in on_device(path)] == [0, 0, 0]


@pytest.mark.parametrize("c_path", [False, True])
@pytest.mark.parametrize("framing, data, want", [
    ("lines", b"one\ntwo\n\nthree", [b"one", b"two", b"", b"three"]),
    ("length-prefixed", b"\0\0\0\x03one\0\0\0\0\0\0\0\x02ab", [b"one", b"", b"ab"]),
    ("raw", b"one\ntwo\n", [b"one\ntwo\n"]),
])
def test_input_in_each_framing(tmp_path, c_path, framing, data, want):
    path = make(tmp_path)
    acks = Acks()
    inp = write_input(tmp_path, data)
    hooks = AppendHooks(on_acks=acks.on_acks, on_frames=acks.on_frames if c_path else None)
    run = append(AppendRequest(path, 9, input_path=inp, framing=framing, base_offset=40), hooks)
    assert run.next_base == 40 + len(want)
    assert payloads_on(path) == [(40 + i, p) for i, p in enumerate(want)]
    if c_path and framing != "raw":
        assert sum(n for n, _, _ in acks.frames) == len(want) and acks.offsets == []
        assert acks.frames[0][1] == 40 and sum(b for _, _, b in acks.frames) == sum(map(len, want))
        assert run.feed.reads >= 1 and run.feed.bytes_read == len(data)
    else:
        assert acks.frames == [] and len(acks.offsets) == len(want)
        assert run.feed.reads == 0


def test_the_input_file_is_closed_after_the_run_and_after_an_error(tmp_path, monkeypatch):
    import walctl.wal.feed as feed

    opened_sources = []
    real = feed.open_source

    def spy(p):
        s = real(p)
        opened_sources.append(s)
        return s

    monkeypatch.setattr(feed, "open_source", spy)
    path = make(tmp_path)
    inp = write_input(tmp_path, b"a\nb\n")
    append(AppendRequest(path, 1, input_path=inp), AppendHooks())
    assert opened_sources[-1].stream.closed
    with pytest.raises(Exception):
        append(AppendRequest(str(tmp_path / "nowal"), 1, input_path=inp), AppendHooks())
    assert opened_sources[-1].stream.closed
    big = write_input(tmp_path, b"a\n" + b"x" * (2 * MiB), "big")
    with pytest.raises(UsageError):
        append(AppendRequest(path, 1, input_path=big), AppendHooks())
    assert opened_sources[-1].stream.closed


def test_a_raw_input_larger_than_a_read_is_one_record(tmp_path):
    path = make(tmp_path, capacity=8 * MiB)
    data = bytes(range(256)) * (6 * KiB)  # 1.5 MiB: two reads of the input
    inp = write_input(tmp_path, data)
    run = append(AppendRequest(path, 2, input_path=inp, framing="raw"), AppendHooks())
    assert run.next_base == 1 and payloads_on(path) == [(0, data)]


def test_an_empty_raw_input_is_one_empty_record(tmp_path):
    path = make(tmp_path)
    inp = write_input(tmp_path, b"")
    run = append(AppendRequest(path, 2, input_path=inp, framing="raw"), AppendHooks())
    assert run.next_base == 1 and payloads_on(path) == [(0, b"")]


# -- refusals: records too large for the WAL, offsets at their bound --------------------------------


def too_large(length, largest, cut):
    return (f"record of {length} bytes or more is larger than this WAL's largest record ({largest} bytes); "
            "nothing of it was written",
            f"{cut} Records before it are appended; a larger record needs a larger WAL (walctl init --capacity)")


LINES_CUT = "a line of the input is longer: is it text with newlines?"


def test_a_data_payload_over_the_largest_record_is_refused_after_the_ones_before(tmp_path):
    path = make(tmp_path)
    largest = largest_payload(append(AppendRequest(path, 1, [b"0"]), AppendHooks()).writer)
    acks = Acks()
    with pytest.raises(UsageError) as e:
        append(AppendRequest(path, 1, [b"a", b"b", b"x" * (largest + 1), b"c"]),
               AppendHooks(on_acks=acks.on_acks, summarize=lambda run: {"next": run.next_base}))
    assert (e.value.what, e.value.hint) == too_large(largest + 1, largest, LINES_CUT)
    assert e.value.where == path
    assert e.value.summary == {"next": 3}  # after the two records appended: where the producer resumes
    assert payloads_on(path) == [(0, b"0"), (1, b"a"), (2, b"b")]
    assert len(acks.offsets) == 2
    with pytest.raises(UsageError):
        append(AppendRequest(path, 1, [b"x" * (largest + 1)]), AppendHooks())
    assert payloads_on(path)[-1] == (2, b"b")


@pytest.mark.parametrize("c_path", [False, True])
def test_a_line_over_the_largest_record_is_refused_after_the_lines_before(tmp_path, c_path):
    path = make(tmp_path)
    largest = largest_payload(append(AppendRequest(path, 1, [b"0"]), AppendHooks()).writer)
    inp = write_input(tmp_path, b"a\nb\n" + b"x" * (2 * MiB) + b"\nc\n")
    hooks = AppendHooks(on_frames=(lambda item: None) if c_path else None)
    with pytest.raises(UsageError) as e:
        append(AppendRequest(path, 1, input_path=inp), hooks)
    assert e.value.what.startswith("record of ") and e.value.what.endswith(
        f" bytes or more is larger than this WAL's largest record ({largest} bytes); nothing of it was written")
    assert int(e.value.what.split()[2]) > largest
    assert e.value.hint == too_large(0, 0, LINES_CUT)[1]
    assert e.value.where == path
    assert payloads_on(path) == [(0, b"0"), (1, b"a"), (2, b"b")]


def test_a_raw_input_over_the_largest_record_is_refused_unread(tmp_path):
    path = make(tmp_path)
    largest = largest_payload(append(AppendRequest(path, 1, [b"0"]), AppendHooks()).writer)
    inp = write_input(tmp_path, b"x" * (2 * MiB))
    with pytest.raises(UsageError) as e:
        append(AppendRequest(path, 1, input_path=inp, framing="raw"), AppendHooks())
    # it reads one byte more than the largest, never the whole input
    assert (e.value.what, e.value.hint) == too_large(largest + 1, largest,
                                                     "the whole input is one record with --framing raw")
    assert payloads_on(path) == [(0, b"0")]


def test_a_length_prefix_over_the_largest_record_is_refused(tmp_path):
    path = make(tmp_path)
    largest = largest_payload(append(AppendRequest(path, 1, [b"0"]), AppendHooks()).writer)
    n = largest + 1
    inp = write_input(tmp_path, b"\0\0\0\x01a" + n.to_bytes(4, "big") + b"x" * n)
    for hooks in (AppendHooks(), AppendHooks(on_frames=lambda item: None)):
        with pytest.raises(UsageError) as e:
            append(AppendRequest(path, 1, input_path=inp, framing="length-prefixed"), hooks)
        assert e.value.what == too_large(n, largest, "")[0]
        assert e.value.hint == too_large(0, 0, "a length prefix asks for more: is the input length-prefixed?")[1]
    assert payloads_on(path) == [(0, b"0"), (1, b"a"), (2, b"a")]


def test_data_offsets_are_checked_before_anything_is_written(tmp_path):
    path = make(tmp_path)
    run = append(AppendRequest(path, 1, [b"a", b"b"], base_offset=TOP - 2), AppendHooks())
    assert run.next_base == TOP and payloads_on(path) == [(TOP - 2, b"a"), (TOP - 1, b"b")]
    run = append(AppendRequest(path, 2, [b"a", b"b", b"c"], base_offset=TOP - 3), AppendHooks())
    assert run.next_base == TOP and len(on_device(path)) == 5
    with pytest.raises(UsageError) as e:
        append(AppendRequest(path, 1, [b"a", b"b", b"c"], base_offset=TOP - 2), AppendHooks())
    assert e.value.what.startswith(f"stream offset {TOP - 2} is out of bounds: ") and "3 records" in e.value.what
    assert e.value.where == path
    assert len(on_device(path)) == 5


@pytest.mark.parametrize("c_path", [False, True])
def test_input_offsets_stop_at_the_last_one_a_batch_may_start_at(tmp_path, c_path):
    path = make(tmp_path)
    inp = write_input(tmp_path, b"a\nb\nc\nd\n")
    hooks = AppendHooks(on_frames=(lambda item: None) if c_path else None)
    with pytest.raises(UsageError) as e:
        append(AppendRequest(path, 1, input_path=inp, base_offset=TOP - 2), hooks)
    assert e.value.what.startswith(f"stream offset {TOP} is out of bounds: ")
    assert e.value.where == path
    assert payloads_on(path) == [(TOP - 2, b"a"), (TOP - 1, b"b")]
    run = append(AppendRequest(path, 1, input_path=write_input(tmp_path, b"e\n", "in2"), base_offset=TOP - 1), hooks)
    assert run.next_base == TOP and payloads_on(path)[-1] == (TOP - 1, b"e")


@pytest.mark.parametrize("c_path", [False, True])
def test_input_offsets_past_the_bound_write_nothing(tmp_path, c_path):
    path = make(tmp_path)
    inp = write_input(tmp_path, b"a\nb\n")
    hooks = AppendHooks(on_frames=(lambda item: None) if c_path else None)
    with pytest.raises(UsageError) as e:
        append(AppendRequest(path, 1, input_path=inp, base_offset=TOP + 5), hooks)
    assert e.value.what.startswith(f"stream offset {TOP + 5} is out of bounds: ")
    assert on_device(path) == []
    with pytest.raises(UsageError) as e:
        append(AppendRequest(path, 1, input_path=inp, base_offset=TOP), hooks)
    assert e.value.what.startswith(f"stream offset {TOP} is out of bounds: ")
    assert on_device(path) == []


def test_a_payload_over_the_format_s_bound_is_refused_after_the_ones_before(tmp_path, monkeypatch):
    from walctl.format import batch as batch_format
    from walctl.format import record as rec

    path = make(tmp_path)
    monkeypatch.setattr(rec, "MAX_BODY_LENGTH", 100 + batch_format.HEADER_SIZE)  # payloads of 100 bytes at most
    inp = write_input(tmp_path, b"a\n" + b"x" * 100 + b"\n" + b"y" * 101 + b"\nz\n")
    with pytest.raises(UsageError) as e:
        append(AppendRequest(path, 1, input_path=inp), AppendHooks())
    assert e.value.what.startswith("record payload 101 is out of bounds: ")
    assert payloads_on(path) == [(0, b"a"), (1, b"x" * 100)]


def test_limits():
    from walctl.format import batch as batch_format

    assert ap._limits() == (TOP - 1, (1 << 32) - 1 - batch_format.HEADER_SIZE)


# -- stopping: check(), an interrupt, an error --------------------------------------------------------


def test_check_stops_taking_input_after_the_records_taken(tmp_path):
    path = make(tmp_path, capacity=4 * MiB)
    payloads = [bytes([65 + i]) * (100 * KiB) for i in range(12)]
    calls = []

    def check():
        calls.append(1)
        return True

    run = append(AppendRequest(path, 1, payloads), AppendHooks(check=check))
    assert calls == [1]
    n = run.next_base
    assert 0 < n < 12
    assert payloads_on(path) == [(i, payloads[i]) for i in range(n)]
    run = append(AppendRequest(path, 2, payloads), AppendHooks())
    assert run.next_base == 12 and payloads_on(path, 2) == list(enumerate(payloads))  # several blocks, in order


def test_check_between_reads_of_the_input(tmp_path, monkeypatch):
    import walctl.wal.framing as framing

    path = make(tmp_path)
    inp = write_input(tmp_path, b"a\nb\nc\n")
    real = framing.batches

    def one_line_a_read(stream, how):
        for view, spans in real(stream, how):
            yield view, spans

    monkeypatch.setattr(framing, "batches", one_line_a_read)
    n = [0]

    def check():
        n[0] += 1
        return False

    run = append(AppendRequest(path, 1, input_path=inp), AppendHooks(check=check))
    assert run.next_base == 3 and n[0] >= 1


def test_an_interrupt_makes_the_records_taken_durable_and_carries_the_summary(tmp_path):
    path = make(tmp_path)

    def check():
        raise KeyboardInterrupt

    acks = Acks()
    with pytest.raises(KeyboardInterrupt) as e:
        append(AppendRequest(path, 1, [b"a", b"b"]),
               AppendHooks(on_acks=acks.on_acks, check=check, summarize=lambda run: {"next": run.next_base,
                                                                                     "s": run.seconds > 0}))
    assert e.value.summary == {"next": 2, "s": True}  # the two records taken are durable: resume at 2
    assert payloads_on(path) == [(0, b"a"), (1, b"b")]
    assert acks.offsets == [0, 58]
    with pytest.raises(KeyboardInterrupt) as e:
        append(AppendRequest(path, 1, [b"c"]), AppendHooks(check=check))
    assert not hasattr(e.value, "summary")


def test_an_error_keeps_its_own_where(tmp_path, monkeypatch):
    path = make(tmp_path)

    def check():
        raise UsageError("stop here", where="elsewhere")

    with pytest.raises(UsageError) as e:
        append(AppendRequest(path, 1, [b"a"]), AppendHooks(check=check))
    assert e.value.where == "elsewhere"
    assert payloads_on(path) == [(0, b"a")]


def test_a_writer_that_cannot_close_is_aborted(tmp_path, monkeypatch):
    path = make(tmp_path)
    import walctl.wal.lifecycle as lc

    real = lc.open_writer
    seen = []

    def failing_close(*a, **kw):
        got = real(*a, **kw)
        w = got.writer
        real_close, real_abort = w.close, w.abort

        def close():
            seen.append("close")
            real_close()
            raise OSError("close failed")

        def abort():
            seen.append("abort")
            real_abort()

        w.close, w.abort = close, abort
        return got

    monkeypatch.setattr(lc, "open_writer", failing_close)
    with pytest.raises(OSError):
        append(AppendRequest(path, 1, [b"a"]), AppendHooks())
    assert seen == ["close", "close", "abort"]


def test_a_missing_device_is_an_error_before_anything(tmp_path):
    with pytest.raises(Exception) as e:
        append(AppendRequest(str(tmp_path / "none"), 1, [b"a"]), AppendHooks())
    assert not isinstance(e.value, AssertionError)


# -- the background: hand-off listener, ring-full backpressure, writer-side upload ----------------------


def test_a_trim_reaches_the_writer_while_it_appends(tmp_path):
    from walctl.wal.handoff import request_trim

    path = make(tmp_path)
    answers = []

    def check():
        if not answers:
            answers.append(request_trim(path, 0, uploaded=False))
        return False

    append(AppendRequest(path, 1, [b"a"] * 3), AppendHooks(check=check))
    assert answers and answers[0][0] in ("OK", "RETRY", "ERR")
    assert request_trim(path, 0)[0] == "ABSENT"  # the listener is closed with the writer


def fill(n=24, size=60 * KiB):
    return [bytes([65 + i % 26]) * size for i in range(n)]


def test_a_full_ring_fails_at_once_without_an_uploader(tmp_path):
    path = make(tmp_path)
    notes = []
    with pytest.raises(FullError) as e:
        append(AppendRequest(path, 1, fill()), AppendHooks(on_note=notes.append))
    assert e.value.what == "WAL full: nothing freed room (no uploader is running)"
    assert notes == []


def test_a_full_ring_waits_and_notes_what_it_waits_for(tmp_path):
    path = make(tmp_path)
    notes = []
    t0 = time.monotonic()
    with pytest.raises(FullError) as e:
        append(AppendRequest(path, 1, fill(), full_wait_s=0.05), AppendHooks(on_note=notes.append))
    assert time.monotonic() - t0 >= 0.05
    assert e.value.what == "WAL full: nothing freed room for 0.05 s (no uploader is running)"
    assert notes == [f"walctl: {path}: WAL full: appends held back until 'walctl upload' or 'walctl trim' (the trim "
                     "hand-off) trims it (exit 7 if nothing frees room for 0.05 s)"]


def test_the_ring_full_note_is_said_once_in_ten_seconds(tmp_path, monkeypatch):
    path = make(tmp_path)
    notes = []
    run = append(AppendRequest(path, 1, [b"a"], full_wait_s=2.5), AppendHooks(on_note=notes.append))
    full = run.writer.full
    assert full.wait_s == 2.5
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    full.on_full(False)
    assert notes == []
    full.on_full(True)
    assert len(notes) == 1 and notes[0].endswith("(exit 7 if nothing frees room for 2.5 s)")
    now[0] += 9.9
    full.on_full(True)
    assert len(notes) == 1
    now[0] += 0.1
    full.on_full(True)
    assert len(notes) == 2
    now[0] += 5
    full.on_full(True)
    assert len(notes) == 2
    assert full.why() == "no uploader is running"


@pytest.fixture
def fast_uploads(monkeypatch):
    import walctl.pipeline.upload.background as bg

    monkeypatch.setattr(bg, "UPLOAD_POLL_S", 0.01)
    return bg


def test_the_writer_side_upload_uploads_and_trims_while_appending(tmp_path, fast_uploads):
    path = make(tmp_path)
    store = LocalStore(tmp_path / "store")
    payloads = fill(40, 50 * KiB)  # twice the ring
    run = append(AppendRequest(path, 1, payloads, store=store.url, upload_at_bytes=100 * KiB),
                 AppendHooks())
    assert run.uploader is not None and run.uploader.upload_at == 100 * KiB
    assert run.writer.full.wait_s == ap.DEFAULT_FULL_WAIT_UPLOADING_S == 120.0
    assert run.uploader.stats.uploads >= 2
    doc = mf.load_latest(store)
    held = [(b, p) for b, p in payloads_on(path)]
    assert doc.streams[1].start == 0 and doc.streams[1].end + len(held) >= 40
    assert run.writer.full.why() == "the background upload freed no room in that time"


def test_the_upload_threshold_is_at_most_half_the_ring(tmp_path, fast_uploads):
    path = make(tmp_path)
    store = LocalStore(tmp_path / "store")
    run = append(AppendRequest(path, 1, [b"a"], store=store.url, upload_at_bytes=1 << 40), AppendHooks())
    assert run.uploader.upload_at == run.writer.ring.size // 2
    run = append(AppendRequest(path, 1, [b"a"], store=store.url, upload_at_bytes=1 << 40, full_wait_s=3.0),
                 AppendHooks())
    assert run.writer.full.wait_s == 3.0


def test_a_failing_background_upload_is_why_the_ring_stays_full(tmp_path, fast_uploads, monkeypatch):
    path = make(tmp_path)
    store = LocalStore(tmp_path / "store")

    def broken(*a, **kw):
        raise RuntimeError("the store is down")

    monkeypatch.setattr(fast_uploads, "upload", broken)
    warned, notes = [], []
    with pytest.raises(FullError) as e:
        append(AppendRequest(path, 1, fill(), store=store.url, upload_at_bytes=100 * KiB, full_wait_s=0.3),
               AppendHooks(on_warning=warned.append, on_note=notes.append))
    assert e.value.what == "WAL full: nothing freed room for 0.3 s (the background upload is failing: the store is down)"
    assert f"{path}: background upload failed (the store is down); retrying later" in warned
    assert notes == [f"walctl: {path}: WAL full: appends held back until this writer's background upload "
                     "(--upload-at) trims it (exit 7 if nothing frees room for 0.3 s)"]


def test_an_uploader_that_cannot_start_closes_the_writer(tmp_path, monkeypatch):
    import walctl.pipeline.upload as up

    path = make(tmp_path)

    class Broken:
        def __init__(self, *a, **kw):
            raise RuntimeError("no uploader")

    monkeypatch.setattr(up, "BackgroundUploader", Broken)
    with pytest.raises(RuntimeError):
        append(AppendRequest(path, 1, [b"a"], store=str(tmp_path / "store"), upload_at_bytes=KiB), AppendHooks())
    # the writer was closed: the next run opens it
    assert append(AppendRequest(path, 1, [b"b"]), AppendHooks()).next_base == 1


def test_warnings_of_the_open_reach_the_hooks(tmp_path, monkeypatch):
    import walctl.wal.lifecycle as lc

    path = make(tmp_path)
    real = lc.open_writer

    def warn(*a, **kw):
        got = real(*a, **kw)
        got.warnings.append("first warning")
        got.sealed_ranges = 2
        return got

    monkeypatch.setattr(lc, "open_writer", warn)
    warned = []
    append(AppendRequest(path, 1, [b"a"]), AppendHooks(on_warning=warned.append))
    assert warned == ["first warning", f"{path}: the last writer did not close cleanly; sealed 2 damaged ranges "
                      "of its last window before appending"]


# -- the first run's survivors, and a negative offset --------------------------------------------------


@pytest.mark.parametrize("c_path", [False, True])
def test_a_negative_stream_offset_writes_nothing(tmp_path, c_path):
    """The engine refuses it itself (the CLI checks --base-offset first): a record of base offset -1
    would be written, acknowledged and then refused by every reader."""
    path = make(tmp_path)
    inp = write_input(tmp_path, b"a\nb\n")
    hooks = AppendHooks(on_frames=(lambda item: None) if c_path else None)
    with pytest.raises(UsageError) as e:
        append(AppendRequest(path, 1, input_path=inp, base_offset=-1), hooks)
    assert e.value.what.startswith("stream offset -1 is out of bounds: ")
    assert on_device(path) == []


def test_a_record_exactly_the_largest_is_written_before_one_over_it(tmp_path):
    path = make(tmp_path)
    largest = largest_payload(append(AppendRequest(make(tmp_path, name="probe"), 1, [b"0"]), AppendHooks()).writer)
    with pytest.raises(UsageError) as e:
        append(AppendRequest(path, 1, [b"x" * largest, b"y" * (largest + 1)]), AppendHooks())
    assert e.value.what == too_large(largest + 1, largest, "")[0]
    assert payloads_on(path) == [(0, b"x" * largest)]


def test_the_hint_of_a_framing_it_does_not_name(tmp_path):
    path = make(tmp_path)
    largest = largest_payload(append(AppendRequest(make(tmp_path, name="probe"), 1, [b"0"]), AppendHooks()).writer)
    with pytest.raises(UsageError) as e:
        append(AppendRequest(path, 1, [b"y" * (largest + 1)], framing="other"), AppendHooks())
    assert e.value.hint == " Records before it are appended; a larger record needs a larger WAL (walctl init --capacity)"


@pytest.mark.parametrize("c_path", [False, True])
def test_a_line_over_the_format_s_bound_at_the_wal_s_largest(tmp_path, monkeypatch, c_path):
    """The format's bound one below the WAL's largest record: a longer line is refused by the format's
    bound (bounds.record_payload's words), not as larger than the WAL."""
    from walctl.format import batch as batch_format
    from walctl.format import record as rec

    path = make(tmp_path)
    largest = largest_payload(append(AppendRequest(make(tmp_path, name="probe"), 1, [b"0"]), AppendHooks()).writer)
    monkeypatch.setattr(rec, "MAX_BODY_LENGTH", largest - 1 + batch_format.HEADER_SIZE)
    inp = write_input(tmp_path, b"a\n" + b"x" * largest + b"\n")
    hooks = AppendHooks(on_frames=(lambda item: None) if c_path else None)
    with pytest.raises(UsageError) as e:
        append(AppendRequest(path, 1, input_path=inp), hooks)
    assert e.value.what.startswith(f"record payload {largest} is out of bounds: ")
    assert payloads_on(path) == [(0, b"a")]


def test_a_raw_input_one_byte_over_the_format_s_bound_is_read_to_its_end(tmp_path, monkeypatch):
    from walctl.format import batch as batch_format
    from walctl.format import record as rec

    path = make(tmp_path, capacity=8 * MiB)
    monkeypatch.setattr(rec, "MAX_BODY_LENGTH", MiB + batch_format.HEADER_SIZE)  # payloads of 1 MiB at most
    inp = write_input(tmp_path, b"r" * (MiB + 1))
    with pytest.raises(UsageError) as e:
        append(AppendRequest(path, 1, input_path=inp, framing="raw"), AppendHooks())
    assert e.value.what.startswith(f"record payload {MiB + 1} is out of bounds: ")
    assert on_device(path) == []
    inp = write_input(tmp_path, b"r" * MiB, "in2")
    append(AppendRequest(path, 1, input_path=inp, framing="raw"), AppendHooks())
    assert payloads_on(path) == [(0, b"r" * MiB)]


def test_how_long_a_full_ring_waits_by_default(tmp_path, fast_uploads):
    """Quick checks of the waits the slower full-ring tests rely on (a mutant fails here first)."""
    path = make(tmp_path)
    assert append(AppendRequest(path, 1, [b"a"]), AppendHooks()).writer.full.wait_s == 0.0
    assert append(AppendRequest(path, 1, [b"a"], full_wait_s=0.5), AppendHooks()).writer.full.wait_s == 0.5
    run = append(AppendRequest(path, 1, [b"a"], store=str(tmp_path / "store"), upload_at_bytes=100 * KiB),
                 AppendHooks())
    assert run.writer.full.wait_s == 120.0 and run.uploader.upload_at == 100 * KiB
    assert run.writer.full.why() == "the background upload freed no room in that time"


def test_a_stream_not_in_the_log_continues_from_the_store(tmp_path):
    store = LocalStore(tmp_path / "store")
    put_objects(store, [[(3, 4, 10)]])
    path = make(tmp_path)
    warned = []
    run = append(AppendRequest(path, 3, [b"x"], store=store.url), AppendHooks(on_warning=warned.append))
    assert run.next_base == 5 and payloads_on(path) == [(4, b"x")] and warned == []
    missing = str(tmp_path / "nostore")
    run = append(AppendRequest(make(tmp_path, name="wal2"), 3, [b"y"], store=missing),
                 AppendHooks(on_warning=warned.append))
    assert run.next_base == 1
    assert warned == [f"{missing}: the store does not exist yet, so stream 3 starts at offset 0"]
