"""Writer-side upload under SIGKILL (issue 13): `walctl append --store --upload-at` killed at random
moments, also in the middle of its background uploads; after each kill `walctl upload` reruns, and
at the end every acknowledged record is in the store exactly once.

The writers are forked from one pre-imported Python (a fork server) so that each of the 50+ kills
costs milliseconds instead of an interpreter start. Kills: WALCTL_UPLOAD_KILLS, default 50.

A kill follows the writer's progress, not the clock (a loaded machine only makes a run slower):
it waits until the writer has acknowledged a random number of records (always more than one
--upload-at's worth) and has committed to the manifest itself (its own upload's prepare), then
lands after a random short delay: before, during or after that upload's objects and commit. On
about one run in ten a failpoint kills the writer itself inside its first upload, between the
prepare and the commit, so that case never depends on timing.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time

import pytest

from walctl.store import manifest as mf
from walctl.store import open_store
from walctl.pipeline.upload import upload
from walctl.wal.lifecycle import init_wal

from forkhelpers import ForkServer, alive
from storehelpers import read_back

KILLS = int(os.environ.get("WALCTL_UPLOAD_KILLS", "50"))
RECORDS_PER_RUN = 2000
# Acknowledged records before a kill: each takes more than 1000 bytes of log, so 40 are more than
# --upload-at 32KiB (an upload is due); 240 blocks at most stay well inside the 2 MiB ring.
ACKS_BEFORE_KILL = (40, 240)
PROGRESS_TIMEOUT_S = 120.0  # a writer that gets no further for this long fails the test
INTERRUPTING_FAILPOINTS = ("upload-after-prepare", "upload-before-commit")

@pytest.fixture
def fork_server():
    server = ForkServer()
    yield server
    server.close()


def _acked_lines(path) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b'"type":"record"')
    except FileNotFoundError:
        return 0


def wait_for_progress(pid: int, out, store, acks: int, commits_before: int) -> None:
    """Until the writer has acknowledged ``acks`` records and committed a manifest of its own
    (or has ended): where the kill may land."""
    deadline = time.monotonic() + PROGRESS_TIMEOUT_S
    while alive(pid):
        if _acked_lines(out) >= acks and mf.manifest_numbers(store)[-1:] > [commits_before]:
            return
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"the writer acknowledged {_acked_lines(out)} of {acks} records and committed "
                        f"{(mf.manifest_numbers(store) or [0])[-1] - commits_before} manifests in "
                        f"{PROGRESS_TIMEOUT_S} s")
        time.sleep(0.005)


@pytest.mark.slow
def test_sigkill_during_writer_side_uploads_loses_and_duplicates_nothing(tmp_path, fork_server):
    wal = str(tmp_path / "wal.img")
    store_dir = str(tmp_path / "store")
    init_wal(wal, 2 << 20)  # a 2 MiB ring: --upload-at 32KiB uploads every ~8 blocks, laps every few runs
    fifo = str(tmp_path / "feed.fifo")
    os.mkfifo(fifo)
    rng = random.Random(13)
    failpoint_runs = set(rng.sample(range(KILLS), max(1, KILLS // 10)))
    acked: dict[int, bytes] = {}  # stream offset -> payload of every acknowledged record
    rerun_commits = 0
    for kill in range(KILLS):
        out, err = tmp_path / "out.ndjson", tmp_path / "err.txt"
        env = {"WALCTL_FAILPOINT": rng.choice(INTERRUPTING_FAILPOINTS)} if kill in failpoint_runs else {}
        commits_before = (mf.manifest_numbers(open_store(store_dir)) or [0])[-1]
        pid = fork_server.spawn(["append", wal, "--input", "-", "--json", "--store", store_dir,
                                 "--upload-at", "32KiB", "--iodepth", str(rng.choice([1, 4])),
                                 # no group commit: blocks of one or two records, an upload every ~8 blocks
                                 "--batch-interval", "0"], stdin=fifo, stdout=out, stderr=err, env=env)
        payloads = [f"run{kill}-{i}-".encode().ljust(1000, b"p") for i in range(RECORDS_PER_RUN)]
        stop = threading.Event()

        def feed():  # ~0.8 MB/s in small bursts: 4 KiB blocks of one or two records
            try:
                with open(fifo, "wb") as pipe:
                    for i in range(0, RECORDS_PER_RUN, 8):
                        if stop.is_set():
                            return
                        pipe.write(b"".join(p + b"\n" for p in payloads[i:i + 8]))
                        pipe.flush()
                        time.sleep(0.01)
            except OSError:  # the writer was killed
                return

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        wait_for_progress(pid, out, open_store(store_dir), rng.randint(*ACKS_BEFORE_KILL), commits_before)
        time.sleep(rng.uniform(0.0, 0.1))
        os.kill(pid, signal.SIGKILL)
        status = fork_server.wait(pid)
        stop.set()
        feeder.join(timeout=10)
        text = out.read_text()
        if os.WIFEXITED(status):  # it finished (or failed) before the kill landed
            assert os.WEXITSTATUS(status) == 0, err.read_text()
        assert "Traceback" not in err.read_text(), err.read_text()
        lines = text.splitlines()
        if lines and not text.endswith("\n"):
            lines = lines[:-1]  # a line cut by the kill: not counted as acknowledged
        index = 0
        for line in lines:
            obj = json.loads(line)
            if obj["type"] != "record":
                continue
            assert obj["base_offset"] not in acked
            acked[obj["base_offset"]] = payloads[index]
            index += 1
        # the rerun an operator (or cron) does after a crash
        result = upload(wal, open_store(store_dir))
        assert result.trimmed_to is not None or result.records == 0
        rerun_commits += 2 if result.commit_number is not None else 0  # prepare + commit
    stored = read_back(open_store(store_dir)).get(0, [])
    offsets = [o for o, _ in stored]
    assert len(offsets) == len(set(offsets))  # exactly once
    have = dict(stored)
    missing = [o for o in acked if o not in have]
    assert not missing, f"acknowledged but not in the store: {missing[:10]}"
    assert all(have[o] == p for o, p in acked.items())
    assert len(acked) > KILLS  # the writers did make progress
    doc = mf.load_latest(open_store(store_dir))
    background_commits = doc.number - rerun_commits
    # a kill between an upload's prepare and its commit leaves the prepared ids behind (gc's job)
    interrupted = len(doc.prepared)
    assert background_commits >= KILLS // 2  # the writers uploaded themselves, again and again
    assert interrupted >= len(failpoint_runs) >= 1  # and some kills landed in the middle of one
    print(f"\nwriter-side upload harness: {KILLS} kills, {background_commits} commits by the writers, "
          f"{interrupted} uploads killed between prepare and commit, "
          f"{len(acked)} acknowledged records, "
          f"{len(stored)} in the store, each exactly once")
