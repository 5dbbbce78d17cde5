"""walctl/pipeline/read.py's passes, closer (issue 32, the survivors of its full mutmut run): the
summary's echo of the asked read, a lending store's views read without a copy, --follow's idle
clock and backoff after passes cut short, a stream deleted under a pass cut short, and the store
settings open_for_read hands on."""

from __future__ import annotations

from walctl.pipeline import readobject as ro
from walctl.pipeline.read import ReadRecord, StreamReader, open_for_read, read_stream
from walctl.store import manifest as mf

from storehelpers import put_objects
from tests.pipeline.test_mut_read import SPECS, Clock, objects

import pytest


@pytest.fixture
def st(local_store):
    put_objects(local_store, SPECS, block_size=2000)
    return local_store


def test_the_summary_echoes_the_asked_read(st):
    _, s = read_stream(st, 1, from_offset=2, to_offset=6, limit=3)
    assert (s.stream_id, s.from_offset, s.to_offset, s.limit, s.records) == (1, 2, 6, 3, 3)
    j = s.to_json()
    assert (j["stream_id"], j["from_offset"], j["to_offset"], j["limit"]) == (1, 2, 6, 3)


def test_a_lending_store_s_views_are_read_without_a_copy(st, monkeypatch):
    calls = []
    for name in ("read_range", "read_tail", "read_range_view", "read_tail_view"):
        real = getattr(st, name)
        monkeypatch.setattr(st, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    events, _ = read_stream(st, 1, payload_views=True, entries_guess=1, read_ahead=False)
    assert len(events) == 9
    assert {"read_range_view", "read_tail_view"} <= set(calls)
    calls.clear()
    events, _ = read_stream(st, 1, entries_guess=1, read_ahead=False)  # copies: the copying reads
    assert len(events) == 9 and {"read_range", "read_tail"} <= set(calls)
    assert not {"read_range_view", "read_tail_view"} & set(calls)


class Scripted(StreamReader):
    """A reader whose passes follow ``script``: (records served, cut short?) each; then settled, empty passes."""

    def __init__(self, *a, script=(), **kw):
        super().__init__(*a, **kw)
        self.script = list(script)

    def _pass(self, *, first, follow):
        self.summary.polls += 1
        served, cut = self.script.pop(0) if self.script else (0, False)
        self.summary.records += served
        self.next = (self.next or 0) + served
        if cut:
            self._unsettled = "the header slots changed"
        return iter(())


def test_follow_s_idle_clock_restarts_at_a_cut_pass_that_served(st):
    # t=0: cut, nothing served; t=1: cut, one served (idle from t=1); t=2: settled, idle 1 < 1.5:
    # wait 1; t=3: idle 2 >= 1.5: the end. Counting from t=0 (or never) would end at t=2.
    c = Clock()
    r = Scripted(st, 1, script=[(0, True), (1, True)])
    assert list(r.events(follow=True, poll_s=1.0, max_poll_s=8.0, idle_timeout_s=1.5, sleep=c.sleep,
                         clock=c)) == []
    assert c.slept == [1.0, 1.0, 1.0] and r.summary.polls == 4 and r.summary.retries == 2


def test_follow_s_backoff_starts_again_after_a_cut_pass(st):
    # settled empty passes double the wait (1, 2, 4); a pass cut short waits poll_s and starts it again
    c = Clock()
    r = Scripted(st, 1, script=[(0, False)] * 4 + [(0, True), (0, True)])
    assert list(r.events(follow=True, poll_s=1.0, max_poll_s=8.0, idle_timeout_s=19.0, sleep=c.sleep,
                         clock=c)) == []
    assert c.slept == [1.0, 2.0, 4.0, 8.0, 1.0, 1.0, 1.0, 2.0]
    assert r.summary.retries == 2


def test_follow_counts_cut_passes_again_after_a_settled_one(st):
    c = Clock()
    r = Scripted(st, 1, script=[(0, True), (0, False), (0, True), (0, True)])
    assert list(r.events(follow=True, poll_s=1.0, max_poll_s=1.0, idle_timeout_s=5.0, sleep=c.sleep,
                         clock=c)) == []
    assert r.summary.retries == 3 and not r.summary.log_moved


def test_a_stream_deleted_under_a_pass_cut_short_ends_the_read(st, monkeypatch):
    # the first pass finds object 2 gone and a newer manifest (which deleted the stream): the next
    # pass, not the first, finds no stream 1 and ends the read instead of saying "no stream"
    st.delete(objects(st)[2].key)

    def drop(m):
        del m.streams[1]

    def moved(self):
        mf.commit(st, drop, command="test: stream 1 deleted")
        return "manifest 2 was committed"

    monkeypatch.setattr(ro.ObjectReading, "_manifest_moved", moved)
    slept = []
    events, s = read_stream(st, 1, sleep=slept.append, poll_s=0.125)
    assert [e.batch.base_offset for e in events if isinstance(e, ReadRecord)] == [0, 1, 2, 3]
    assert s.retries == 1 and slept == [0.125] and s.manifest_number == 2 and s.polls == 2


def test_open_for_read_hands_on_the_s3_settings(monkeypatch):
    import walctl.store

    calls = []
    monkeypatch.setattr(walctl.store, "open_store", lambda url, **kw: calls.append((url, kw)) or "store")
    settings = object()
    assert open_for_read("s3://b/p", "http://127.0.0.1:9", s3=settings) == "store"
    assert calls == [("s3://b/p", {"endpoint_url": "http://127.0.0.1:9", "create": False, "s3": settings})]
