"""read --follow --wal while a writer writes and uploads commit and trim (issue 27): every record
the appender acknowledged is printed once, in offset order, with no finding.

Before: the follower read the manifest, then the WAL's header; an upload committing and trimming
in between moved records out of the WAL into a manifest the pass had not read, and the follower
called them "neither in the store nor in the WAL" and never went back for them (1,008 of
200,001 records). A writer starting after a clean close while the follower scanned the WAL made
the log longer than its clean header said: "WAL end_mismatch", exit 3, on a healthy log."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from racehelpers import Stopped, clean_log, ndjson, start, walctl

from walctl.errors import EXIT_OK

APPENDS = 50
FEED_LINES = 20_000  # records fed to the appender (and more while fewer than UPLOADS uploads have run)
UPLOADS = 3
CAP_S = 120  # the feed's bound: a run that has not done its work by then fails
# A follower stops at --idle-timeout only if it never prints the last acknowledged record (then the
# test fails); else the test ends it with Ctrl-C (exit 0) once it has. A short timeout ended
# followers that waited longer than it for a writer starting on a loaded machine.
IDLE_CAP = "30s"


class _Follower:
    """``read --follow --wal --json``, its output read as it comes (a full pipe would stop it
    polling); ``finish(end)``: once it has printed the record ending at ``end``, Ctrl-C."""

    def __init__(self, wal: str, store: str):
        self.proc = start("read", "--store", store, "--stream", "1", "--follow", "--wal", wal, "--json",
                          "--idle-timeout", IDLE_CAP)
        self.lines: list[str] = []
        self.end = 0
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self.changed:
                self.lines.append(line)
                if '"type":"record"' in line.replace(" ", ""):
                    self.end = max(self.end, ndjson(line)[0]["end_offset"])
                self.changed.notify_all()
        with self.changed:
            self.lines.append("")  # (its end)
            self.changed.notify_all()

    def finish(self, end: int) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) once it printed ``end`` and took Ctrl-C (or ended by itself)."""
        with self.changed:
            self.changed.wait_for(lambda: self.end >= end or self.lines[-1:] == [""], timeout=CAP_S)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # "Ctrl-C ends it (exit 0)"
        try:
            self.proc.wait(60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self.reader.join()
        return self.proc.returncode, "".join(self.lines), self.proc.stderr.read()


def _served(out: str) -> tuple[list[int], list[dict]]:
    lines = ndjson(out)
    return ([x["base_offset"] for x in lines if x["type"] == "record"],
            [x for x in lines if x["type"] == "finding"])


def _seeded(tmp_path, capacity: str = "32MiB") -> tuple[str, str]:
    """A WAL whose first record (stream 1, offset 0) is uploaded: the store has a manifest."""
    wal, store = str(tmp_path / "w.img"), str(tmp_path / "store")
    for args in (("init", wal, "--capacity", capacity, "--no-prewrite"), ("append", wal, "--stream", "1", "seed"),
                 ("upload", wal, "--store", store)):
        code, _, err = walctl(*args)
        assert code == 0, err
    return wal, store


@pytest.mark.slow
def test_follow_prints_every_acknowledged_record_once_while_uploads_commit_and_trim(tmp_path):
    wal, store = _seeded(tmp_path)
    follower = _Follower(wal, store)
    append_log = open(tmp_path / "append.err", "w")  # (its warnings must not fill a pipe read at the end)
    appender = start("append", wal, "--stream", "1", "--iodepth", "16", "--batch-interval", "0", "--bandwidth", "12",
                     "--json", "-", stdin=-1, stderr=append_log)
    stop = threading.Event()
    uploads: list[int] = []

    def upload_loop() -> None:
        while not stop.is_set():
            uploads.append(walctl("upload", wal, "--store", store)[0])
            stop.wait(0.2)

    resumed = threading.Event()

    def feed() -> None:  # stdin, full speed (in 100-line writes: the appender batches them)
        # A fixed amount of work, not a time (5 s did 1 upload at load 17).
        end, i = time.monotonic() + CAP_S, 0
        while (i < FEED_LINES or len(uploads) < UPLOADS or not resumed.is_set()) and time.monotonic() < end:
            appender.stdin.write("".join(f"r{i + k}\n" for k in range(100)))
            appender.stdin.flush()
            i += 100
            time.sleep(0.01)
        appender.stdin.close()

    uploader, feeder = threading.Thread(target=upload_loop), threading.Thread(target=feed)
    uploader.start()
    feeder.start()
    acks = []
    drain = threading.Thread(target=lambda: acks.append(appender.stdout.read()))
    drain.start()  # (read while fed: a full pipe of acknowledgements would stall it)
    # The follower held (SIGSTOP) while uploads commit and trim records it has not read, then let
    # go: those are only in the store when it resumes, so some records must come from the store.
    # Left to run, a follower that keeps up with the writer reads every record from the WAL (a
    # loaded CI run, -n 3: the store path never taken, by chance).
    with follower.changed:
        assert follower.changed.wait_for(lambda: follower.end > 1 or follower.lines[-1:] == [""], timeout=CAP_S)
    follower.proc.send_signal(signal.SIGSTOP)
    try:
        held_at, deadline = len(uploads), time.monotonic() + CAP_S
        while len(uploads) < held_at + 2 and time.monotonic() < deadline:  # one upload starts after the stop
            time.sleep(0.05)
        assert len(uploads) >= held_at + 2, "no upload committed while the follower was held"
    finally:
        follower.proc.send_signal(signal.SIGCONT)
        resumed.set()
    drain.join()
    acks_text = acks[0]
    appender.wait(60)
    feeder.join()
    append_log.close()
    append_err = (tmp_path / "append.err").read_text()
    stop.set()
    uploader.join()
    assert appender.returncode == 0, append_err
    acked = [0] + [x["stream_offset"] for x in ndjson(acks_text) if x["type"] == "record"]
    code, out, err = follower.finish(acked[-1] + 1)
    served, found = _served(out)
    assert found == [] and code == EXIT_OK, err
    assert served == acked  # each once, in order, none skipped
    assert len(uploads) >= UPLOADS and set(uploads) == {0}  # uploads committed and trimmed meanwhile
    assert any(x["source"] == "store" for x in ndjson(out)[1:] if x["type"] == "record")


@pytest.mark.slow
def test_follow_while_short_appends_run_one_after_another(tmp_path):
    """Appends one after another (the issue ran 100), each a writer starting on a cleanly closed
    log: no finding. The appends run in this process (the same command, its open, flock and clean
    close; a process start each cost 0.3 s of CPU, and the follower saw them 5x further apart)."""
    from typer.testing import CliRunner

    from walctl.cli import app

    wal, store = _seeded(tmp_path)
    follower = _Follower(wal, store)
    runner = CliRunner()
    for i in range(APPENDS):
        result = runner.invoke(app, ["append", wal, "--stream", "1", f"a{i}", f"b{i}"])
        assert result.exit_code == 0, result.stderr
    code, out, err = follower.finish(1 + 2 * APPENDS)
    served, found = _served(out)
    assert found == [] and code == EXIT_OK, err
    assert served == list(range(1 + 2 * APPENDS))


def test_a_writer_starting_inside_the_follower_s_wal_scan(tmp_path):
    """The follower stopped in its scan of a cleanly closed WAL while a writer starts and appends
    past the clean end: no end_mismatch; it reads the WAL again and serves every record once."""
    wal = clean_log(tmp_path, records=3000)  # 3 MiB: the scan's first chunk does not reach the end
    store = str(tmp_path / "store")
    code, _, err = walctl("upload", wal, "--store", store, "--no-trim")
    assert code == 0, err
    code, _, err = walctl("append", wal, "--stream", "1", "-", input=b"y" * 999 + b"\n" * 1 + (b"z" * 999 + b"\n") * 1500)
    assert code == 0, err
    follower = Stopped(tmp_path, "read-wal-scan", "read", "--store", store, "--stream", "1", "--follow", "--wal", wal,
                       "--json", "--idle-timeout", "1s")
    code, _, err = walctl("append", wal, "--stream", "1", "after", "the", "clean", "close")
    assert code == 0, err
    code, out, err = follower.resume()
    served, found = _served(out)
    assert found == [] and code == EXIT_OK, err
    assert served == list(range(3000 + 1501 + 4))
    summary = ndjson(out)[-1]
    assert summary["retries"] >= 1 and summary["log_moved"] is False and summary["complete"] is True


class _ListsBeforeTheUpload:
    """A store whose first manifest listing is answered as it was just before ``upload`` (a
    callable: a real upload's commit and trim, then a writer's appends) ran: the reader's pass
    then works from a manifest older than the WAL it reads next."""

    def __init__(self, store, upload):
        self._store, self._upload = store, upload

    def __getattr__(self, name):
        return getattr(self._store, name)

    def list(self, prefix: str):
        found = list(self._store.list(prefix))
        if self._upload is not None and prefix.startswith("manifest"):
            upload, self._upload = self._upload, None
            upload()
        return found


def test_an_upload_and_a_wrap_between_the_manifest_and_the_wal_skip_nothing(tmp_path):
    """A pass lists the manifest; an upload commits the WAL's records and trims them, and a writer
    wraps the ring over them; then the pass reads the WAL. Before: "offsets [1, n) are neither in
    the store nor in the WAL", never read again. Now the WAL's header is read before the manifest,
    the overwritten range is not called missing while a newer manifest exists, and the next pass
    serves it from the store: every record once, in order."""
    from walctl.pipeline.read import ReadFinding, ReadRecord, StreamReader, open_for_read

    wal, store_path = _seeded(tmp_path, capacity="4MiB")
    line = b"w" * 999 + b"\n"
    code, _, err = walctl("append", wal, "--stream", "1", "-", input=line * 2500)  # 2.5 MiB of a 4 MiB ring
    assert code == 0, err

    def upload_then_wrap() -> None:
        for args, data in ((("upload", wal, "--store", store_path), None),
                           (("append", wal, "--stream", "1", "-"), line * 2000)):  # laps over the first records
            code, _, err = walctl(*args, input=data)
            assert code == 0, err

    store = _ListsBeforeTheUpload(open_for_read(store_path), upload_then_wrap)
    reader = StreamReader(store, 1, wal=wal)
    events = list(reader.events(follow=True, poll_s=0.01, idle_timeout_s=0.5))
    assert [e for e in events if isinstance(e, ReadFinding)] == []
    served = [e.batch.base_offset for e in events if isinstance(e, ReadRecord)]
    assert served == list(range(1 + 2500 + 2000))  # each once, in order
    assert reader.summary.retries >= 1  # the pass that met the overwritten range stopped and read again


@pytest.mark.parametrize("moving", [False, True])
def test_read_without_follow_on_a_wal_that_keeps_moving(tmp_path, monkeypatch, moving):
    """Damage in the WAL's tail is corruption when the WAL stood still under the read; when its
    header slots changed under every retry, the read ends at the range it could not settle with
    an informational wal_moved finding (log_moved, complete false), serving nothing past it."""
    from walctl.pipeline.read import GAP, WAL_MOVED, ReadFinding, ReadRecord, StreamReader, open_for_read
    from walctl.wal.readsession import RESCANS, RecoverSession

    from tests.cli.conftest import flip_byte, physical

    wal, store = _seeded(tmp_path)
    code, _, err = walctl("append", wal, "--stream", "1", "-", input=(b"v" * 999 + b"\n") * 600)
    assert code == 0, err
    flip_byte(wal, physical(300 << 10, 32 << 20))  # a record's bytes, mid-tail: the records after it are cut off
    if moving:
        monkeypatch.setattr(RecoverSession, "moved", lambda self: "a writer started while it was read")
    reader = StreamReader(open_for_read(store), 1, wal=wal)
    events = list(reader.events(sleep=lambda s: None))
    found = [e for e in events if isinstance(e, ReadFinding)]
    served = [e.batch.base_offset for e in events if isinstance(e, ReadRecord)]
    if moving:
        assert served == list(range(len(served))) and 0 < len(served) < 601  # nothing past the range
        assert [f.kind for f in found] == [WAL_MOVED] and not found[0].corrupt
        assert found[0].start_offset == len(served)
        s = reader.summary.to_json()
        assert s["log_moved"] is True and s["complete"] is False and s["retries"] > RESCANS
    else:
        gap = found[0]
        assert gap.kind == GAP and gap.corrupt and reader.summary.retries == 0  # exit 3, as before
        assert served == list(range(gap.start_offset)) + list(range(gap.end_offset, 601))


def test_a_writer_starting_right_after_the_pass_read_the_wal_header(tmp_path, monkeypatch):
    """A writer starts on the cleanly closed WAL just after a pass read its header slots, and
    appends past the clean nextOffset. Before: "WAL end_mismatch" (exit 3) on a healthy log. Now
    the pass sees the slots changed and reads again: every record once, no finding."""
    from walctl.pipeline.read import ReadFinding, ReadRecord, StreamReader, open_for_read
    from walctl.wal import readsession

    wal, store = _seeded(tmp_path)
    code, _, err = walctl("append", wal, "--stream", "1", "a", "b")
    assert code == 0, err
    real_open, opened = readsession.open_reader, []

    def open_then_a_writer_starts(path, **kwargs):
        session = real_open(path, **kwargs)
        if not opened:
            code, _, err = walctl("append", wal, "--stream", "1", "c", "d", "e")
            assert code == 0, err
        opened.append(path)
        return session

    monkeypatch.setattr(readsession, "open_reader", open_then_a_writer_starts)
    reader = StreamReader(open_for_read(store), 1, wal=wal)
    events = list(reader.events(follow=True, poll_s=0.01, idle_timeout_s=0.3))
    assert [e for e in events if isinstance(e, ReadFinding)] == []
    assert [e.batch.base_offset for e in events if isinstance(e, ReadRecord)] == list(range(6))
