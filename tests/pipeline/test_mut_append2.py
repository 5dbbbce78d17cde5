"""walctl append's engine (walctl/pipeline/append.py), closer (issue 32, the survivors of its full
mutmut run): the options that reach open_writer and the pacing budget, the store settings that
reach each open_store (first_base_offset, _feed, the writer-side uploader), the acknowledgement
text rendered on the C path, the hand-off listener's writer and its close when the uploader cannot
start, and the ring-full note's first time."""

from __future__ import annotations

import time
import pytest

from walctl.format import framepack
from walctl.pipeline import append as ap
from walctl.pipeline.append import AppendHooks, AppendRequest, append, first_base_offset

from tests.pipeline.test_mut_append import KiB, MiB, make, opened, payloads_on, write_input


class Opened(Exception):
    pass


def spy_open_store(monkeypatch, calls, then=None):
    import walctl.store

    real = walctl.store.open_store

    def spy(url, **kw):
        calls.append((url, kw))
        if then is not None:
            raise then
        return real(url, **{k: v for k, v in kw.items() if k not in ("endpoint_url", "s3")})

    monkeypatch.setattr(walctl.store, "open_store", spy)


def test_first_base_offset_hands_on_the_store_settings(monkeypatch):
    calls, s3 = [], object()
    spy_open_store(monkeypatch, calls, then=Opened())
    with pytest.raises(Opened):
        first_base_offset(opened(), 1, None, device="wal", store_url="s3://b/p", endpoint_url="http://h:9", s3=s3)
    assert calls == [("s3://b/p", {"endpoint_url": "http://h:9", "create": False, "missing_ok": True, "s3": s3})]


def test_append_hands_on_the_store_settings_to_first_base_offset(tmp_path, monkeypatch):
    path = make(tmp_path)
    seen, s3 = [], object()

    def fbo(o, sid, base, **kw):
        seen.append((sid, base, kw))
        return 7

    monkeypatch.setattr(ap, "first_base_offset", fbo)
    run = append(AppendRequest(path, 3, [b"a"], store="s3://b/p", endpoint_url="http://h:9", s3=s3), AppendHooks())
    assert run.next_base == 8 and payloads_on(path) == [(7, b"a")]
    (sid, base, kw), = seen
    assert (sid, base, kw["device"], kw["store_url"], kw["endpoint_url"], kw["s3"]) == (
        3, None, path, "s3://b/p", "http://h:9", s3)


def test_the_writer_side_uploader_opens_the_store_with_its_settings(tmp_path, monkeypatch):
    path = make(tmp_path)
    calls, s3 = [], object()
    spy_open_store(monkeypatch, calls, then=Opened())
    with pytest.raises(Opened):
        append(AppendRequest(path, 1, [b"a"], base_offset=0, store="s3://b/p", endpoint_url="http://h:9", s3=s3,
                             upload_at_bytes=KiB), AppendHooks())
    assert calls == [("s3://b/p", {"endpoint_url": "http://h:9", "s3": s3})]
    # the writer and its hand-off listener were closed: the next run opens the WAL and listens again
    assert append(AppendRequest(path, 1, [b"b"]), AppendHooks()).listener is not None


def test_an_uploader_that_cannot_start_closes_the_listener(tmp_path, monkeypatch):
    import walctl.wal.handoff as handoff

    path = make(tmp_path)
    listeners = []
    real = handoff.start_listener

    def start(device, writer, *a):
        listeners.append(real(device, writer, *a))
        listeners[-1].closes = 0
        close = listeners[-1].close

        def counted():
            listeners[-1].closes += 1
            close()

        listeners[-1].close = counted
        return listeners[-1]

    monkeypatch.setattr(handoff, "start_listener", start)
    spy_open_store(monkeypatch, [], then=Opened())
    with pytest.raises(Opened):
        append(AppendRequest(path, 1, [b"a"], base_offset=0, store=str(tmp_path / "s"), upload_at_bytes=KiB),
               AppendHooks())
    assert listeners[0].closes >= 1


def test_the_hand_off_listener_serves_this_writer(tmp_path, monkeypatch):
    import walctl.wal.handoff as handoff

    path = make(tmp_path)
    seen = []
    real = handoff.start_listener
    monkeypatch.setattr(handoff, "start_listener", lambda device, writer, *a: seen.append(writer) or real(
        device, writer, *a))
    run = append(AppendRequest(path, 1, [b"a"]), AppendHooks())
    assert seen == [run.writer]


def test_the_upload_threshold_is_a_whole_number_of_bytes(tmp_path, monkeypatch):
    import walctl.pipeline.upload.background as bg

    monkeypatch.setattr(bg, "UPLOAD_POLL_S", 0.01)
    path = make(tmp_path)
    run = append(AppendRequest(path, 1, [b"a"], store=str(tmp_path / "s"), upload_at_bytes=1 << 40), AppendHooks())
    assert type(run.uploader.upload_at) is int and run.uploader.upload_at == run.writer.ring.size // 2


def test_the_writer_gets_the_request_s_options(tmp_path, monkeypatch):
    import walctl.wal.lifecycle as lc

    path = make(tmp_path)
    calls = []
    real = lc.open_writer

    def spy(device, **kw):
        calls.append(kw)
        return real(device, **kw)

    monkeypatch.setattr(lc, "open_writer", spy)
    warnings = []
    hooks = AppendHooks(on_warning=warnings.append)
    run = append(AppendRequest(path, 4, [b"a"], iodepth=3, iops=500.0, bandwidth=2.0, batch_interval_s=0.002),
                 hooks)
    kw, = calls
    assert (kw["need_stream"], kw["iodepth"], kw["on_ack"], kw["budget"], kw["batch_interval_s"]) == (
        4, 3, None, run.budget, 0.002)
    # a wait for a trim on the device is said through the hooks' warning (walctl.wal.lifecycle)
    assert kw["on_trim_wait"] == hooks.on_warning
    assert run.budget is not None and (run.budget.iops, run.budget.bandwidth_bytes_per_s) == (500.0, 2 * MiB)
    calls.clear()
    append(AppendRequest(path, 4, [b"b"], base_offset=1), AppendHooks())
    assert calls[0]["need_stream"] is None and calls[0]["iodepth"] == 6 and calls[0]["batch_interval_s"] is None
    calls.clear()
    inp = tmp_path / "in.txt"
    inp.write_bytes(b"c\nd\n")
    append(AppendRequest(path, 4, input_path=str(inp)), AppendHooks())
    assert calls[0]["iodepth"] == 10  # a regular file: walctl.defaults.FILE_IODEPTH


@pytest.mark.skipif(not framepack.AVAILABLE, reason="the C extension is not built")
def test_the_c_path_renders_the_hooks_acknowledgement_text(tmp_path):
    path = make(tmp_path)
    frames = []
    inp = write_input(tmp_path, b"one\ntwo\n")
    append(AppendRequest(path, 9, input_path=inp, base_offset=40),
           AppendHooks(on_frames=frames.append, render=framepack.RENDER_OFFSETS))
    assert b"".join(f.acks for f in frames) == b"0\n60\n"  # each record's WAL offset, a line each
    frames.clear()
    append(AppendRequest(path, 9, input_path=inp), AppendHooks(on_frames=frames.append))
    assert [f.acks for f in frames] == [None] * len(frames) and frames


def test_the_first_ring_full_note_is_said_at_once(tmp_path, monkeypatch):
    path = make(tmp_path)
    notes = []
    run = append(AppendRequest(path, 1, [b"a"], full_wait_s=1.0), AppendHooks(on_note=notes.append))
    monkeypatch.setattr(time, "monotonic", lambda: 0.0)  # a clock just started
    run.writer.full.on_full(True)
    assert len(notes) == 1
