"""walctl.wal.handoff (issue 32): the trim hand-off's socket protocol, in-process, against a stand-in
writer (its contract: ``acked_end`` and ``trim_to(offset, uploaded=...)``): the answers' exact
words, who may trim, and trim_or_hand_off's choice between the lock and the writer."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from walctl.errors import RefusedError, TrimPendingError, UsageError
from walctl.wal import handoff
from walctl.wal.handoff import TrimListener, address, request_trim, start_listener, trim_or_hand_off

from threadhelpers import this_thread_only


class StandIn:
    """A writer as the listener sees it: records acknowledged up to ``acked_end``; trims recorded."""

    def __init__(self, acked_end=1000, previous=0, refuse=None):
        self.acked_end, self.previous, self.refuse = acked_end, previous, refuse
        self.calls = []

    def trim_to(self, offset, *, uploaded=False):
        self.calls.append((offset, uploaded))
        if self.refuse is not None:
            raise self.refuse
        previous, self.previous = self.previous, offset
        return previous


@pytest.fixture
def wal(tmp_path):
    path = tmp_path / "w.img"
    path.write_bytes(b"")
    return str(path)


@pytest.fixture
def listening(wal):
    writer = StandIn()
    trims = []
    listener = TrimListener(wal, writer, on_trim=trims.append)
    yield wal, writer, listener, trims
    listener.close()


def ask(wal, line: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(address(wal))
        sock.sendall(line)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(256):
            data += chunk
        return data


def test_the_address_of_a_file_is_its_device_and_inode(wal):
    st = os.stat(wal)
    assert address(wal) == f"\0walctl-trim/{st.st_dev}:{st.st_ino}".encode()
    assert handoff.PREFIX == "walctl-trim/"


def test_the_address_of_a_block_device_is_its_device_number():
    dev = "/dev/loop0"
    if not os.path.exists(dev):
        pytest.skip("no /dev/loop0 here")
    assert address(dev) == f"\0walctl-trim/blk:{os.stat(dev).st_rdev}".encode()


def test_a_trim_request_is_served_by_the_writer(listening):
    wal, writer, listener, trims = listening
    assert request_trim(wal, 100) == ("OK", "0")
    assert writer.calls == [(100, True)]
    assert request_trim(wal, 200, uploaded=False) == ("OK", "100")
    assert writer.calls[-1] == (200, False)
    assert listener.trims == 2 and trims == [100, 200]


def test_the_raw_answers_are_lines(listening):
    wal, writer, _, _ = listening
    assert ask(wal, b"TRIM 5 UPLOADED\n") == b"OK 0\n"
    assert ask(wal, b"TRIM 6\n") == b"OK 5\n"
    assert writer.calls == [(5, True), (6, False)]
    assert ask(wal, b"TRIM 7 uploaded\n") == b"OK 6\n"
    assert writer.calls[-1] == (7, False)
    assert ask(wal, b"TRIM 8 X UPLOADED\n") == b"OK 7\n"
    assert writer.calls[-1] == (8, True)
    assert ask(wal, b"TRIM 9 UPLOADED") == b"OK 8\n"  # the client closed without a newline


def test_an_offset_not_acknowledged_yet_is_asked_again(listening):
    wal, writer, listener, trims = listening
    assert request_trim(wal, 1000) == ("RETRY", "offset 1000 is not acknowledged yet")
    assert request_trim(wal, 999) == ("OK", "0")
    assert writer.calls == [(999, True)] and listener.trims == 1


@pytest.mark.parametrize("line", [b"TRIM\n", b"TRIM x\n", b"TRIM -1\n", b"CUT 5\n", b"\n", b"trim 5\n"])
def test_a_bad_request_is_refused(listening, line):
    wal, writer, listener, _ = listening
    assert ask(wal, line) == b"ERR 2 bad request\n"
    assert writer.calls == [] and listener.trims == 0


def test_a_refused_trim_answers_the_error_code_and_words(wal):
    writer = StandIn(refuse=UsageError("offset 5 holds a padding record", hint="ignored"))
    trims = []
    listener = TrimListener(wal, writer, on_trim=trims.append)
    try:
        assert request_trim(wal, 5) == ("ERR", "2 offset 5 holds a padding record")
        writer.refuse = RefusedError("busy")
        assert request_trim(wal, 6) == ("ERR", "5 busy")
        assert listener.trims == 0 and trims == []
    finally:
        listener.close()


def test_without_a_listener_the_writer_is_absent(wal):
    assert request_trim(wal, 5) == ("ABSENT", "no writer listens for trims")


def test_a_second_listener_on_the_same_wal_is_none(listening):
    wal, _, listener, _ = listening
    assert start_listener(wal, StandIn()) is None
    assert request_trim(wal, 3) == ("OK", "0")


def test_start_listener_serves_and_close_frees_the_name(wal):
    writer = StandIn()
    listener = start_listener(wal, writer)
    assert isinstance(listener, TrimListener) and listener.on_trim is None
    assert request_trim(wal, 4) == ("OK", "0")
    listener.close()
    assert not listener._thread.is_alive()
    assert request_trim(wal, 4) == ("ABSENT", "no writer listens for trims")
    again = start_listener(wal, writer)
    assert again is not None
    again.close()


def test_start_listener_raises_other_socket_errors(wal, monkeypatch):
    def boom(self, path, writer, on_trim=None):
        raise PermissionError(13, "denied")

    monkeypatch.setattr(TrimListener, "__init__", boom)
    with pytest.raises(PermissionError):
        start_listener(wal, StandIn())


def serve_once(wal, answer: bytes):
    """A stand-in listener that answers one request with ``answer``; returns its thread and socket."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(address(wal))
    srv.listen(1)
    got = []

    def run():
        conn, _ = srv.accept()
        with conn:
            got.append(conn.recv(256))
            conn.sendall(answer)

    t = threading.Thread(target=run)
    t.start()
    return t, srv, got


@pytest.mark.parametrize("answer,expected", [
    (b"WHAT now\n", ("RETRY", "unexpected answer 'WHAT now'")),
    (b"", ("RETRY", "unexpected answer ''")),
    (b"ERR 5 refused: uid 7 may not trim this WAL\n", ("ERR", "5 refused: uid 7 may not trim this WAL")),
    (b"OK\n", ("OK", "")),
])
def test_request_trim_reads_the_answer(wal, answer, expected):
    t, srv, got = serve_once(wal, answer)
    try:
        assert request_trim(wal, 77) == expected
        t.join(5)
        assert got == [b"TRIM 77 UPLOADED\n"]
    finally:
        srv.close()


def test_request_trim_without_uploaded_says_so(wal):
    t, srv, got = serve_once(wal, b"OK 1\n")
    try:
        assert request_trim(wal, 78, uploaded=False) == ("OK", "1")
        t.join(5)
        assert got == [b"TRIM 78\n"]
    finally:
        srv.close()


def test_a_hand_off_that_fails_midway_is_retried(wal, monkeypatch):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(address(wal))
    srv.listen(1)
    monkeypatch.setattr(handoff, "REQUEST_TIMEOUT_S", 0.05)
    try:
        kind, rest = request_trim(wal, 1)  # accepted by the backlog, never answered
        assert kind == "RETRY" and rest.startswith("hand-off failed: ")
    finally:
        srv.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_a_peer_of_another_uid_may_not_trim(listening):
    wal, writer, _, _ = listening
    name = address(wal)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: another user asks
        try:
            os.close(r)
            os.setuid(65534)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(5)
                sock.connect(name)
                # the refusal comes before the request is read (test_handoff_refusal.py sends first)
                os.write(w, sock.recv(256))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        answer = f.read().decode()
    os.waitpid(pid, 0)
    assert answer == "ERR 5 refused: uid 65534 may not trim this WAL\n"
    assert writer.calls == []
    assert request_trim(wal, 5) == ("OK", "0")  # the listener lives on after a refusal
    assert writer.calls == [(5, True)]


def test_a_peer_of_the_writers_uid_may_trim(listening, monkeypatch):
    wal, writer, _, _ = listening
    monkeypatch.setattr(handoff.os, "getuid", lambda: 4242)
    assert request_trim(wal, 5) == ("OK", "0")  # root may always
    assert writer.calls == [(5, True)]


# -- trim_or_hand_off -------------------------------------------------------------------------
def test_a_free_lock_trims_directly(wal):
    done = []
    assert trim_or_hand_off(wal, 9, 5.0, lambda p, o: done.append((p, o))) == "direct"
    assert done == [(wal, 9)]


def test_a_locked_wal_is_trimmed_by_its_writer(listening):
    wal, writer, _, _ = listening

    def locked(path, offset):
        raise RefusedError("locked by pid 1")

    assert trim_or_hand_off(wal, 9, 5.0, locked) == "writer"
    assert writer.calls == [(9, True)]


def test_a_refused_offset_is_a_usage_error(wal):
    writer = StandIn(refuse=UsageError("offset 9 holds a padding record"))
    listener = TrimListener(wal, writer)

    def locked(path, offset):
        raise RefusedError("locked")

    try:
        with pytest.raises(UsageError) as info:
            trim_or_hand_off(wal, 9, 5.0, locked)
        assert info.value.what == "the writer refused the trim: offset 9 holds a padding record"
        assert info.value.where == wal
    finally:
        listener.close()


def test_with_no_time_left_the_trim_is_pending_with_the_last_reason(wal):
    def locked(path, offset):
        raise RefusedError("locked by pid 12")

    with pytest.raises(TrimPendingError) as info:
        trim_or_hand_off(wal, 9, 0.0, locked)
    err = info.value
    assert err.what == ("uploaded and committed, but the WAL was not trimmed to 9 within 0 s "
                        "(locked by pid 12; no writer listens for trims)")
    assert err.where == wal
    assert err.hint == ("the writer must run walctl with the trim hand-off; rerun upload (it skips what is "
                        "committed), or pass --no-trim")


def test_a_pending_trim_reports_the_writers_retry_or_other_refusal(listening):
    wal, writer, _, _ = listening

    def locked(path, offset):
        raise RefusedError("locked")

    with pytest.raises(TrimPendingError) as info:
        trim_or_hand_off(wal, 5000, 0.0, locked)
    assert info.value.what.endswith("within 0 s (offset 5000 is not acknowledged yet)")
    writer.refuse = RefusedError("busy now")
    with pytest.raises(TrimPendingError) as info:
        trim_or_hand_off(wal, 10, 0.0, locked)
    assert info.value.what.endswith("within 0 s (the writer refused the trim: busy now)")


def test_the_hand_off_retries_until_the_lock_is_free(wal, monkeypatch):
    # handoff.time is the time module itself: a thread an earlier test left behind (a listener, a
    # reaper) that sleeps meanwhile must still sleep for real and must not land in `pauses`.
    pauses = []
    monkeypatch.setattr(handoff.time, "sleep", this_thread_only(pauses.append, time.sleep))
    tries = []

    def locked_twice(path, offset):
        tries.append(offset)
        if len(tries) < 3:
            raise RefusedError("locked")

    assert trim_or_hand_off(wal, 9, 60.0, locked_twice) == "direct"
    assert tries == [9, 9, 9] and pauses == [0.1, 0.1]


def test_constants():
    assert (handoff.ACCEPT_POLL_S, handoff.REQUEST_TIMEOUT_S, handoff.RETRY_PAUSE_S) == (0.2, 5.0, 0.1)


def test_the_listener_runs_in_a_named_daemon_thread(listening):
    _, _, listener, _ = listening
    assert listener._thread.name == "walctl-trim-listener"
    assert listener._thread.daemon is True  # never keeps a finished writer's process alive


def test_an_idle_listener_keeps_listening_past_its_poll(listening):
    import time

    wal, writer, _, _ = listening
    time.sleep(handoff.ACCEPT_POLL_S * 2)  # idle across two accept polls
    assert request_trim(wal, 3) == ("OK", "0")


def test_a_client_that_never_asks_does_not_hold_the_listener(listening, monkeypatch):
    wal, writer, _, _ = listening
    monkeypatch.setattr(handoff, "REQUEST_TIMEOUT_S", 0.1)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.connect(address(wal))  # says nothing: the listener gives up on it
        assert ask(wal, b"TRIM 4\n") == b"OK 0\n"
    assert writer.calls == [(4, False)]


def test_close_wakes_the_listener_at_once(wal, monkeypatch):
    import time

    monkeypatch.setattr(handoff, "ACCEPT_POLL_S", 60.0)  # only the wake-up can end its accept in time
    listener = TrimListener(wal, StandIn())
    started = time.monotonic()
    listener.close()
    assert time.monotonic() - started < 30
    assert not listener._thread.is_alive()


def test_start_listener_passes_the_trim_callback(wal):
    trims = []
    listener = start_listener(wal, StandIn(), on_trim=trims.append)
    try:
        assert request_trim(wal, 6) == ("OK", "0")
        assert trims == [6]
    finally:
        listener.close()


def test_a_request_sent_in_pieces_is_joined(listening):
    import time

    wal, writer, _, _ = listening
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(address(wal))
        sock.sendall(b"TRIM 1")
        time.sleep(0.05)  # (a second segment; joined or not, the answer is the same)
        sock.sendall(b"5 UPLOADED\n")
        assert sock.recv(256) == b"OK 0\n"
    assert writer.calls == [(15, True)]


def test_a_request_is_read_up_to_256_bytes(listening):
    wal, writer, _, _ = listening
    line = b"TRIM 5 " + b"x" * 241 + b" UPLOADED"  # 257 bytes: its last one is never read
    assert len(line) == 257
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(address(wal))
        sock.sendall(line)
        try:
            sock.recv(256)  # the answer, or a reset (the listener left a byte unread)
        except OSError:
            pass
    assert writer.calls == [(5, False)]  # "UPLOADE": not an uploaded trim


def test_a_request_with_bytes_that_are_not_ascii_is_answered(listening):
    wal, writer, _, _ = listening
    assert ask(wal, b"TRIM 5 \xff\n") == b"OK 0\n"
    assert ask(wal, b"TRIM \xff5\n") == b"ERR 2 bad request\n"
    assert request_trim(wal, 6) == ("OK", "5")  # the listener is still there
