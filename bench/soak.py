#!/usr/bin/env python3
"""Soak: a WAL written and drained continuously (issue 13).

    python bench/soak.py [--mode writer|cron|both] [--capacity 256MiB] [--rate 20] [--seconds 600]
        [--upload-at 64MiB] [--upload-every 10] [--record-bytes 1024] [--batch-interval 2ms] [--dir DIR]

mode "writer": one `walctl append --input - --store DIR --upload-at SIZE` fed RATE MiB/s of
records for SECONDS: it uploads and trims itself. mode "cron": a plain `walctl append --input -`
and `walctl upload` from another process every --upload-every seconds (the writer takes the
trims through its hand-off socket). Either way the writer must never stop with "WAL full", and
afterwards every acknowledged record is in exactly one place (a live object of the store, or
the WAL after its trim point), exactly once, byte for byte. Prints one JSON line per mode, with
the ring's peak fill (sampled every 0.1 s: the end of the acknowledged log minus the trim point in
the WAL's header) and how fast the log grew against the payload (block padding; group commit,
append --batch-interval, keeps it small).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from walctl.sizes import parse_size  # noqa: E402


def _walctl(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "walctl", *map(str, args)], capture_output=True, **kwargs)


def payload(index: int, size: int) -> bytes:
    return f"soak-{index}-".encode().ljust(size, b"s")


def trim_offset(wal: str) -> int:
    """The trim point in the WAL's current header slot (read beside the running writer, never locked)."""
    from walctl.format.header import HEADERS_SIZE
    from walctl.wal.headers import decode_slots

    with open(wal, "rb") as fh:
        return max(decode_slots(fh.read(HEADERS_SIZE)).header.trim_offset, 0)


# `walctl upload` with walctl.pipeline.upload.run.KEEP_SCANNED_BYTES set from argv[1] first: 0 makes every cron upload build
# its objects from the second, streamed read of the WAL, as an upload of more than 64 MiB does.
_UPLOAD_KEEPING = """
import sys
from walctl.pipeline.upload import run as upload_run
upload_run.KEEP_SCANNED_BYTES = int(sys.argv.pop(1))
from walctl.cli import main
sys.argv = ["walctl"] + sys.argv[1:]
main()
"""


def run_soak(workdir: str, *, mode: str, capacity: int, rate_mib_s: float, seconds: float, upload_at: int,
             upload_every_s: float, record_bytes: int = 1024, batch_interval: str | None = None,
             upload_keep_bytes: int | None = None) -> dict:
    """One soak run in ``workdir``; returns its figures. Raises AssertionError when a check fails.

    ``upload_keep_bytes`` (cron mode): the cron uploads keep at most this many scanned bytes (None:
    upload's own KEEP_SCANNED_BYTES); 0 streams every object from a second read of the WAL."""
    os.makedirs(workdir, exist_ok=True)
    wal, store = os.path.join(workdir, f"{mode}.img"), os.path.join(workdir, f"{mode}-store")
    if os.path.exists(wal):  # a fresh WAL and store for every run
        os.unlink(wal)
    shutil.rmtree(store, ignore_errors=True)
    res = _walctl("init", wal, "--capacity", capacity)
    assert res.returncode == 0, res.stderr
    args = ["append", wal, "--input", "-"]
    if batch_interval is not None:
        args += ["--batch-interval", batch_interval]
    if mode == "writer":
        args += ["--store", store, "--upload-at", upload_at]
    proc = subprocess.Popen([sys.executable, "-m", "walctl", *map(str, args)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    acked: list[int] = []  # the k-th acknowledged record (stream offset k) has WAL offset acked[k]

    def read_acks():
        for line in proc.stdout:
            acked.append(int(line))

    reader = threading.Thread(target=read_acks, daemon=True)
    reader.start()
    uploads: list[int] = []
    stop = threading.Event()

    upload_seconds: list[float] = []
    upload_mib: list[float] = []  # payload each cron upload moved

    def cron():  # like cron: a start every upload_every_s (or at once, when the last one ran longer)
        due = time.monotonic() + upload_every_s
        while not stop.wait(max(0.0, due - time.monotonic())):
            began = time.monotonic()
            args = ["upload", wal, "--store", store, "--json", "--trim-timeout", "30"]
            if upload_keep_bytes is None:
                r = _walctl(*args)
            else:
                r = subprocess.run([sys.executable, "-c", _UPLOAD_KEEPING, str(upload_keep_bytes), *args],
                                   capture_output=True)
            uploads.append(r.returncode)
            upload_seconds.append(time.monotonic() - began)
            if r.returncode == 0:
                upload_mib.append(json.loads(r.stdout.decode().splitlines()[-1])["payload_bytes"] / (1 << 20))
            due += upload_every_s

    uploader = threading.Thread(target=cron, daemon=True) if mode == "cron" else None
    if uploader is not None:
        uploader.start()
    ring_bytes = capacity - 8192
    record_log_bytes = 24 + 33 + record_bytes  # record header + StreamRecordBatch header + payload
    peak_fill = [0]  # bytes between the trim point and the end of the acknowledged log, at most

    def sample_fill():
        while not stop.wait(0.1):
            if acked:
                peak_fill[0] = max(peak_fill[0], acked[-1] + record_log_bytes - trim_offset(wal))

    sampler = threading.Thread(target=sample_fill, daemon=True)
    sampler.start()
    per_tick = 0.01
    batch = max(1, int(rate_mib_s * (1 << 20) * per_tick / (record_bytes + 1)))
    sent = 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            pause = started + (sent / batch) * per_tick - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            proc.stdin.write(b"".join(payload(sent + i, record_bytes) + b"\n" for i in range(batch)))
            proc.stdin.flush()
            sent += batch
        proc.stdin.close()
    except BrokenPipeError:
        pass
    code = proc.wait(timeout=120)
    reader.join(timeout=30)
    elapsed = time.monotonic() - started
    stop.set()
    sampler.join(timeout=10)
    if uploader is not None:
        uploader.join(timeout=60)
    err = proc.stderr.read().decode(errors="replace")
    ring_rate = (acked[-1] / elapsed / (1 << 20)) if acked else 0.0
    assert code == 0, (f"the writer stopped with exit {code} after {elapsed:.1f} s ({len(acked)} records acknowledged, "
                       f"the log grew {ring_rate:.1f} MiB/s with block padding; peak fill "
                       f"{peak_fill[0] / (1 << 20):.0f} MiB of {ring_bytes / (1 << 20):.0f}; upload durations "
                       f"{[round(x, 1) for x in upload_seconds]} s for {[round(x) for x in upload_mib]} MiB): "
                       f"{err.strip()[-300:]}")
    assert all(c == 0 for c in uploads), f"an upload failed: exit codes {uploads}"
    assert len(acked) == sent, (len(acked), sent)
    # Where is every record now? The store's live objects, and the WAL after its trim point.
    from walctl.store import open_store

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from storehelpers import read_back  # the test suite's reader of every live object

    in_store = read_back(open_store(store)).get(0, []) if os.path.isdir(store) else []
    rec = _walctl("recover", wal, "--json", "--payload", "base64")
    assert rec.returncode == 0, rec.stderr
    in_wal = [(o["base_offset"], base64.b64decode(o["payload"])) for o in map(json.loads, rec.stdout.splitlines())
              if o["type"] == "record"]
    places = [o for o, _ in in_store] + [o for o, _ in in_wal]
    assert len(places) == len(set(places)), "a record is in two places (or twice in one)"
    have = dict(in_store + in_wal)
    missing = [k for k in range(sent) if k not in have]
    assert not missing, f"{len(missing)} acknowledged records are nowhere, first {missing[:5]}"
    assert all(have[k] == payload(k, record_bytes) for k in range(sent)), "a record came back different"
    written = sent * (record_bytes + 1)
    return {"mode": mode, "seconds": round(elapsed, 2), "records": sent, "mib_written": round(written / (1 << 20), 1),
            "mib_per_s": round(written / (1 << 20) / elapsed, 2),
            "log_mib_per_s": round(acked[-1] / elapsed / (1 << 20), 2) if acked else 0.0,
            # log bytes per record byte: 1.0 is no padding at all; ~3.8 is every 1 KiB record alone in a 4 KiB block
            "log_per_record_bytes": round((acked[-1] + record_log_bytes) / (sent * record_log_bytes), 2) if acked else 0.0,
            "ring_laps": round(acked[-1] / ring_bytes, 2) if acked else 0,
            "peak_fill_mib": round(peak_fill[0] / (1 << 20), 1), "peak_fill_pct": round(100 * peak_fill[0] / ring_bytes, 1),
            "in_store": len(in_store), "in_wal": len(in_wal), "exactly_once": True, "cron_uploads": len(uploads),
            "cron_upload_s_max": round(max(upload_seconds), 2) if upload_seconds else None,
            "cron_upload_s_mean": round(sum(upload_seconds) / len(upload_seconds), 2) if upload_seconds else None,
            "cron_upload_s": [round(x, 2) for x in upload_seconds], "cron_upload_mib": [round(x) for x in upload_mib],
            "batch_interval": batch_interval or "default", "full": False}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["writer", "cron", "both"], default="both")
    p.add_argument("--capacity", default="256MiB")
    p.add_argument("--rate", type=float, default=20.0, help="MiB/s of records fed to the writer")
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--upload-at", default="64MiB")
    p.add_argument("--upload-every", type=float, default=10.0, help="seconds between cron uploads")
    p.add_argument("--record-bytes", type=int, default=1024)
    p.add_argument("--batch-interval", default=None,
                   help="the writer's append --batch-interval (e.g. 0 for none, 2ms; default: append's default)")
    p.add_argument("--dir", default=None, help="work directory (default: a temporary one, removed after)")
    a = p.parse_args(argv)
    workdir = a.dir or tempfile.mkdtemp(prefix="walctl-soak-")
    try:
        for mode in (["writer", "cron"] if a.mode == "both" else [a.mode]):
            print(json.dumps(run_soak(workdir, mode=mode, capacity=parse_size(a.capacity), rate_mib_s=a.rate,
                                      seconds=a.seconds, upload_at=parse_size(a.upload_at),
                                      upload_every_s=a.upload_every, record_bytes=a.record_bytes,
                                      batch_interval=a.batch_interval)), flush=True)
    finally:
        if a.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
