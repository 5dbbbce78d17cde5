#!/usr/bin/env python3
"""Chaos soak (issue 27): every piece of walctl at full speed at once, killed at random, checked by
an oracle that knows what was acknowledged.

    python bench/chaos_soak.py [--seconds 600] [--capacity 64MiB] [--device PATH | --loop]
        [--s3] [--spark-every 0] [--record-bytes 1024] [--upload-at 2MiB] [--seed N] [--dir DIR]

What runs, all at once, for SECONDS:
- one writer, `walctl append --input - --store URL --upload-at SIZE --json`, fed by a producer
  faster than the disk (no pacing: backpressure holds it), SIGKILLed every few seconds and
  restarted (it continues the stream where the WAL or the store says);
- `walctl upload` from another process every 0.5 s, like a cron (sometimes SIGKILLed);
- two followers, `walctl read --follow --wal DEVICE --json`, SIGKILLed now and then and restarted
  `--from` the next offset they expect;
- `walctl compact --level so` and `walctl gc --grace 3s` every few seconds (sometimes SIGKILLed);
  with --spark-every N, every N-th compaction is `--level all` (a local Spark job);
- with --s3: the store is a moto S3 server over HTTP behind a TCP proxy that drops every
  connection and refuses new ones for 1-2 s every 8-12 s (the commands ride it out: --retry-for).

The oracle: the producer knows every payload it gave each writer, the writer's acknowledgements
say at which stream offset each landed. At the end (the writer closed, a last upload): the store
holds each stream offset exactly once, every acknowledged one with its payload; each follower saw
every offset exactly once, in order, with the store's payload; no command reported a finding
(the log is never damaged); none ran past its timeout. Prints one JSON line of figures:
records/s acknowledged, peak ring fill, uploads, compactions, kills, restarts.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, REPO)

STREAM = 1
COMMAND_TIMEOUT_S = 120.0   # a command (upload, compact, gc) running longer than this is a hang
FOLLOW_CATCH_UP_S = 60.0    # a follower catching up after the writer closed may not go this long without progress
WRITER_CLOSE_S = 120.0      # a writer whose stdin closed must exit within this
KILL_AFTER_ACKS = 512       # a writer is killed only once it acknowledged this many records
STALL_S = 90.0              # ... and one that acknowledges nothing for this long is a hang
# A writer started while an upload trims the WAL directly (under the writer's lock) waits for that
# trim, as walctl append does (up to WALCTL_TRIM_WAIT, docs/CLI.md): counted as writer_trim_waits
# from its stderr line. Any exit 5 of a writer is a problem.
TRIM_WAIT_LINE = "to finish trimming"


def payload(instance: int, index: int, size: int) -> bytes:
    return f"{instance}:{index}:".encode().ljust(size, b"p")


class TcpProxy:
    """127.0.0.1:port -> upstream; ``outage(seconds)`` drops every connection and refuses new ones."""

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.down_until = 0.0
        self.conns: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.outages = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def outage(self, seconds: float) -> None:
        with self.lock:
            self.down_until = time.monotonic() + seconds
            self.outages += 1
            for c in list(self.conns):
                _close(c)
            self.conns.clear()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if time.monotonic() < self.down_until:
                _close(client)
                continue
            try:
                up = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _close(client)
                continue
            with self.lock:
                self.conns.update((client, up))
            for a, b in ((client, up), (up, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(src)
            _close(dst)
            with self.lock:
                self.conns.discard(src)
                self.conns.discard(dst)

    def close(self) -> None:
        _close(self.sock)


def _json(line: bytes) -> dict | None:
    """A JSON line, or None for the last line of a SIGKILLed process (cut short: nothing it promised)."""
    try:
        return json.loads(line)
    except ValueError:
        return None if not line.endswith(b"\n") else json.loads(line)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


class Chaos:
    """One run: the pieces, their kills, and what each saw."""

    def __init__(self, workdir: str, *, device: str | None, store_url: str | None, env: dict | None,
                 capacity: int, record_bytes: int, upload_at: str, seconds: float, seed: int,
                 spark_every: int = 0, kill_every_s: tuple[float, float] = (2.0, 5.0), followers: int = 2,
                 compact_every_s: float = 3.0, gc_every_s: float = 3.0, upload_every_s: float = 0.5,
                 proxy: S3Service | None = None):
        self.workdir, self.seconds, self.record_bytes = workdir, seconds, record_bytes
        self.rng = random.Random(seed)
        self.device = device or os.path.join(workdir, "wal.img")
        self.store = store_url or os.path.join(workdir, "store")
        self.env = dict(os.environ, **(env or {}))
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, self.env.get("PYTHONPATH", "")) if p)
        self.capacity, self.upload_at, self.spark_every = capacity, upload_at, spark_every
        self.kill_every_s, self.compact_every_s, self.gc_every_s = kill_every_s, compact_every_s, gc_every_s
        self.upload_every_s, self.n_followers, self.proxy = upload_every_s, followers, proxy
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked: dict[int, bytes] = {}  # stream offset -> payload, from the writers' acknowledgements
        self.last_wal_offset = 0
        self.problems: list[str] = []
        self.counts = {"writer_runs": 0, "writer_kills": 0, "writer_trim_waits": 0,
                       "uploads": 0, "upload_kills": 0, "upload_exits": {},
                       "compactions": 0, "compact_kills": 0, "compact_exits": {}, "gcs": 0, "gc_kills": 0, "gc_exits": {},
                       "follower_runs": 0, "follower_kills": 0, "full_waits": 0}
        self.followed: list[dict[int, bytes]] = [{} for _ in range(followers)]
        self.next_offset = [0] * followers
        self.peak_fill = 0
        self.final_end: int | None = None  # the stream's end once the writer closed and all is uploaded
        self._end_input = threading.Event()  # the end of the run: the last writer's input closes
        self._instance_acks = 0  # records the running writer acknowledged

    # -- helpers -------------------------------------------------------------------
    def walctl(self, *args, timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "walctl", *map(str, args)], capture_output=True, text=True,
                              env=self.env, timeout=timeout, stdin=subprocess.DEVNULL)

    def popen(self, *args, stdin=subprocess.DEVNULL) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "walctl", *map(str, args)], stdin=stdin,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env)

    def problem(self, text: str) -> None:
        with self.lock:
            self.problems.append(text)

    def count_exit(self, key: str, code: int) -> None:
        with self.lock:
            exits = self.counts[key]
            exits[str(code)] = exits.get(str(code), 0) + 1

    def finding_in(self, what: str, text: str) -> None:
        for line in text.splitlines():
            if '"type":"finding"' in line.replace(" ", "") or line.startswith("FINDING"):
                self.problem(f"{what} reported a finding on a healthy log: {line[:300]}")

    # -- the pieces ------------------------------------------------------------------
    def writer_loop(self) -> None:
        instance = 0
        while not self.stop.is_set():
            instance += 1
            self.counts["writer_runs"] += 1
            proc = self.popen("append", self.device, "--stream", STREAM, "--input", "-", "--framing",
                              "length-prefixed", "--store", self.store, "--upload-at", self.upload_at, "--json",
                              "--batch-interval", "0", stdin=subprocess.PIPE)
            acks = threading.Thread(target=self._read_acks, args=(proc, instance), daemon=True)
            acks.start()
            feed = threading.Thread(target=self._feed, args=(proc, instance), daemon=True)
            feed.start()
            errors: list[bytes] = []
            stderr = threading.Thread(target=self._read_stderr, args=(proc, errors), daemon=True)
            stderr.start()
            ended = self._wait_to_kill(proc)
            if ended:  # the end: close its input, let it drain and close cleanly
                self._end_input.set()
            elif proc.poll() is None:
                self.counts["writer_kills"] += 1
                proc.kill()
            try:
                code = proc.wait(timeout=WRITER_CLOSE_S)
            except subprocess.TimeoutExpired:
                self.problem(f"writer {instance} did not exit within {WRITER_CLOSE_S:.0f} s (hang)")
                proc.kill()
                code = proc.wait()
            feed.join(timeout=30)
            acks.join(timeout=30)
            stderr.join(timeout=30)
            err = b"".join(errors).decode(errors="replace")
            if code != 0 and (ended or code != -signal.SIGKILL):
                self.problem(f"writer {instance} exited {code}: {err.strip()[-400:]}")
            self.finding_in(f"writer {instance}", err)

    def _wait_to_kill(self, proc: subprocess.Popen) -> bool:
        """Wait until the writer is due for its kill (True: the run ended first). A kill follows the
        writer's progress, not the clock alone (a loaded machine only makes a run slower): it is due
        once the random interval has passed and this writer has acknowledged KILL_AFTER_ACKS
        records. A writer that acknowledges nothing for STALL_S is a problem (a hang)."""
        due = time.monotonic() + self.rng.uniform(*self.kill_every_s)
        seen, last_progress = -1, time.monotonic()
        while not self.stop.wait(0.05):
            now, acks = time.monotonic(), self._instance_acks
            if acks != seen:
                seen, last_progress = acks, now
            if proc.poll() is not None or (now >= due and acks >= KILL_AFTER_ACKS):
                return False
            if now - last_progress > STALL_S:
                self.problem(f"a writer acknowledged nothing for {STALL_S:.0f} s (after {acks} records): a hang")
                return False
        return True

    def _feed(self, proc: subprocess.Popen, instance: int) -> None:
        size, j = self.record_bytes, 0
        try:
            while not self._end_input.is_set():
                chunk = b"".join(struct.pack(">I", size) + payload(instance, j + i, size) for i in range(256))
                proc.stdin.write(chunk)
                j += 256
            proc.stdin.close()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def _read_stderr(self, proc: subprocess.Popen, lines: list[bytes]) -> None:
        """The writer's stderr, as it comes (a test sees a wait begin): kept in ``lines``."""
        for line in proc.stderr:
            lines.append(line)
            if TRIM_WAIT_LINE.encode() in line:
                self.counts["writer_trim_waits"] += 1

    def _read_acks(self, proc: subprocess.Popen, instance: int) -> None:
        k = self._instance_acks = 0
        for line in proc.stdout:
            rec = _json(line)
            if rec is None:
                continue
            if rec["type"] == "record":
                with self.lock:
                    self.acked[rec["stream_offset"]] = payload(instance, k, self.record_bytes)
                    self.last_wal_offset = max(self.last_wal_offset, rec["wal_offset"])
                k += 1
                self._instance_acks = k
            elif rec["type"] == "summary":
                self.counts["full_waits"] += rec.get("full_waits", 0)

    def periodic(self, every_s: float, fn) -> None:
        while not self.stop.wait(every_s * self.rng.uniform(0.7, 1.3)):
            fn()

    def _killable(self, key: str, kills: str, *args) -> None:
        proc = self.popen(*args)
        kill_after = self.rng.uniform(0.05, 1.0) if self.rng.random() < 0.2 else None
        try:
            out, err = proc.communicate(timeout=kill_after if kill_after is not None else COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            if kill_after is None:
                self.problem(f"walctl {' '.join(map(str, args[:1]))} ran past {COMMAND_TIMEOUT_S:.0f} s (hang)")
            else:
                self.counts[kills] += 1
            proc.kill()
            out, err = proc.communicate()
        self.count_exit(key, proc.returncode)
        text = out.decode(errors="replace") + err.decode(errors="replace")
        self.finding_in(args[0], text)
        if proc.returncode in (1, 3, 6):  # a bug, false damage, or an outage not ridden out
            self.problem(f"walctl {args[0]} exited {proc.returncode}: {err.decode(errors='replace').strip()[-400:]}")

    def upload_once(self) -> None:
        self.counts["uploads"] += 1
        self._killable("upload_exits", "upload_kills", "upload", self.device, "--store", self.store, "--json")

    def compact_once(self) -> None:
        self.counts["compactions"] += 1
        spark = self.spark_every and self.counts["compactions"] % self.spark_every == 0
        level = ["--level", "all", "--master", "local[1]"] if spark else ["--level", "so"]
        self._killable("compact_exits", "compact_kills", "compact", "--store", self.store, *level,
                       "--so-target-size", "8MiB")

    def gc_once(self) -> None:
        self.counts["gcs"] += 1
        self._killable("gc_exits", "gc_kills", "gc", "--store", self.store, "--grace", "3s")

    def follower_loop(self, i: int) -> None:
        while True:
            self.counts["follower_runs"] += 1
            proc = self.popen("read", "--store", self.store, "--stream", STREAM, "--follow", "--wal", self.device,
                              "--json", "--payload", "base64", "--from", self.next_offset[i])
            reader = threading.Thread(target=self._follow, args=(proc, i), daemon=True)
            reader.start()
            ended = self.stop.wait(self.rng.uniform(3 * self.kill_every_s[0], 3 * self.kill_every_s[1]))
            if ended:
                return self._finish_follower(proc, reader, i)
            self.counts["follower_kills"] += 1
            proc.kill()
            proc.wait()
            reader.join(timeout=30)

    def _follow(self, proc: subprocess.Popen, i: int) -> None:
        seen = self.followed[i]
        for line in proc.stdout:
            rec = _json(line)
            if rec is None:
                continue
            if rec["type"] == "record":
                base = rec["base_offset"]
                if base != self.next_offset[i]:
                    self.problem(f"follower {i} got stream offset {base} where {self.next_offset[i]} was next "
                                 f"({'skipped' if base > self.next_offset[i] else 'again'})")
                seen.setdefault(base, base64.b64decode(rec["payload"]))
                self.next_offset[i] = max(self.next_offset[i], rec["end_offset"])
            elif rec["type"] == "finding":
                self.problem(f"follower {i} reported a finding on a healthy log: {line.strip()[:300]}")

    def _finish_follower(self, proc, reader, i: int) -> None:
        deadline = time.monotonic() + FOLLOW_CATCH_UP_S + WRITER_CLOSE_S
        while self.final_end is None and time.monotonic() < deadline:
            time.sleep(0.05)
        # It must catch up: it may take long after a long run, but never FOLLOW_CATCH_UP_S without progress.
        seen, last_progress = -1, time.monotonic()
        while self.final_end is not None and self.next_offset[i] < self.final_end and proc.poll() is None:
            now = time.monotonic()
            if self.next_offset[i] != seen:
                seen, last_progress = self.next_offset[i], now
            elif now - last_progress > FOLLOW_CATCH_UP_S:
                break
            time.sleep(0.05)
        if self.final_end is None or self.next_offset[i] < self.final_end:
            self.problem(f"follower {i} reached offset {self.next_offset[i]} of {self.final_end} "
                         f"(exit {proc.poll()})")
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.problem(f"follower {i} did not stop on SIGTERM (hang)")
            proc.kill()
        reader.join(timeout=30)

    def sample_fill(self) -> None:
        from walctl.format.header import HEADERS_SIZE
        from walctl.wal.headers import decode_slots

        ring = self.capacity - HEADERS_SIZE
        while not self.stop.wait(0.1):
            try:
                fd = os.open(self.device, os.O_RDONLY)
                try:
                    head = decode_slots(os.pread(fd, HEADERS_SIZE, 0)).header
                finally:
                    os.close(fd)
            except Exception:
                continue
            fill = self.last_wal_offset + self.record_bytes + 60 - max(head.trim_offset, 0)
            if 0 < fill <= ring:
                self.peak_fill = max(self.peak_fill, fill)

    def outages(self) -> None:
        while not self.stop.wait(self.rng.uniform(8.0, 12.0)):
            self.proxy.outage(self.rng.uniform(1.0, 2.0))

    # -- the run -----------------------------------------------------------------------
    def run(self) -> dict:
        init = ["init", self.device, "--force"]
        if self.device.startswith(os.path.join(self.workdir, "")):
            init += ["--capacity", self.capacity, "--no-prewrite"]
        res = self.walctl(*init)
        assert res.returncode == 0, res.stderr
        started = time.monotonic()
        threads = [threading.Thread(target=self.writer_loop, name="writer")]
        threads += [threading.Thread(target=self.periodic, args=(self.upload_every_s, self.upload_once)),
                    threading.Thread(target=self.periodic, args=(self.compact_every_s, self.compact_once)),
                    threading.Thread(target=self.periodic, args=(self.gc_every_s, self.gc_once)),
                    threading.Thread(target=self.sample_fill)]
        followers = [threading.Thread(target=self.follower_loop, args=(i,)) for i in range(self.n_followers)]
        if self.proxy is not None:
            threads.append(threading.Thread(target=self.outages, daemon=True))
        for t in threads:
            t.start()
        time.sleep(1.0)  # let the first writer create the stream before the followers ask for it
        for t in followers:
            t.start()
        self.stop.wait(self.seconds)
        self.stop.set()
        for t in threads:
            t.join(timeout=WRITER_CLOSE_S + COMMAND_TIMEOUT_S)
        elapsed = time.monotonic() - started
        # The writer closed cleanly; upload what its uploads left, then the followers must catch up.
        for _ in range(5):
            last = self.walctl("upload", self.device, "--store", self.store, "--json")
            if last.returncode == 0:
                break
        else:
            self.problem(f"the final upload failed: exit {last.returncode}: {last.stderr.strip()[-300:]}")
        self.final_end = max(self.acked, default=-1) + 1
        stored = self.check_store()
        self.final_end = max(self.final_end, len(stored))
        for t in followers:
            t.join(timeout=FOLLOW_CATCH_UP_S + WRITER_CLOSE_S + 60)
        for i, seen in enumerate(self.followed):
            bad = [o for o, p in seen.items() if stored.get(o) != p]
            if bad:
                self.problem(f"follower {i}: {len(bad)} records differ from the store's, first at {min(bad)}")
        return {"seconds": round(elapsed, 1), "records_acked": len(self.acked),
                "records_per_s": round(len(self.acked) / elapsed), "record_bytes": self.record_bytes,
                "mib_per_s": round(len(self.acked) * self.record_bytes / elapsed / (1 << 20), 2),
                "peak_fill_pct": round(100 * self.peak_fill / (self.capacity - 8192), 1),
                "store_records": len(stored), "proxy_outages": self.proxy.outages if self.proxy else 0,
                **self.counts, "problems": self.problems}

    def check_store(self) -> dict[int, bytes]:
        """The store's records of the stream, checked: each offset once, contiguous from 0, every
        acknowledged one with its payload."""
        sys.path.insert(0, os.path.join(REPO, "tests"))
        from storehelpers import read_back
        from walctl.store import open_store

        old = {k: os.environ.get(k) for k in self.env if k.startswith("AWS_")}
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("AWS_")})
        try:
            rows = read_back(open_store(self.store)).get(STREAM, [])
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        offsets = [o for o, _ in rows]
        if len(offsets) != len(set(offsets)):
            self.problem(f"{len(offsets) - len(set(offsets))} stream offsets are in the store twice")
        if offsets != list(range(len(offsets))):
            self.problem(f"the store's offsets are not 0..{len(offsets) - 1} (first gap near "
                         f"{next((i for i, o in enumerate(offsets) if o != i), None)})")
        stored = dict(rows)
        lost = [o for o in self.acked if o not in stored]
        wrong = [o for o, p in self.acked.items() if o in stored and stored[o] != p]
        if lost:
            self.problem(f"{len(lost)} acknowledged records are not in the store, first {min(lost)}")
        if wrong:
            self.problem(f"{len(wrong)} acknowledged records came back different, first {min(wrong)}")
        return stored


FAKE_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true"}


class S3Service:
    """moto's S3 server over HTTP behind a TcpProxy, in a child process of their own (so that the
    soak's own threads do not slow the server down): ``env`` points walctl at the proxy;
    ``outage(seconds)`` drops every connection and refuses new ones for that long."""

    def __init__(self, bucket: str = "chaos"):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve-s3", bucket],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=dict(os.environ, **FAKE_AWS))
        ready = self.proc.stdout.readline().split()
        if not ready or ready[0] != "ready":
            self.close()
            raise RuntimeError(f"the S3 service did not start: {ready}")
        self.port, self.upstream_port = int(ready[1]), int(ready[2])
        self.env = dict(FAKE_AWS, AWS_ENDPOINT_URL=f"http://127.0.0.1:{self.port}")
        self.store_url = f"s3://{bucket}/soak"
        self.outages = 0

    def outage(self, seconds: float) -> None:
        self.outages += 1
        self.proc.stdin.write(f"outage {seconds}\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _serve_s3(bucket: str) -> None:
    """The child of S3Service: serve until stdin closes; 'outage SECONDS' lines start outages."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1").create_bucket(Bucket=bucket)
    proxy = TcpProxy((host, port))
    print("ready", proxy.port, port, flush=True)
    for line in sys.stdin:
        word, _, arg = line.partition(" ")
        if word == "outage":
            proxy.outage(float(arg))
    proxy.close()
    server.stop()


def attach_loop(path: str, size: int) -> str:
    with open(path, "wb") as f:
        f.truncate(size)
    out = subprocess.run(["losetup", "--direct-io=on", "-f", "--show", path], capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--capacity", default="64MiB", help="WAL size (a file WAL; a loop device gets this size)")
    p.add_argument("--device", default=None, help="an existing device or file to use as the WAL (it is re-initialised)")
    p.add_argument("--loop", action="store_true", help="a loop device with direct I/O over a file in --dir (root)")
    p.add_argument("--s3", action="store_true", help="the store on moto's S3 over HTTP behind a dropping proxy")
    p.add_argument("--spark-every", type=int, default=0, help="every N-th compaction runs the Spark level too")
    p.add_argument("--record-bytes", type=int, default=1024)
    p.add_argument("--upload-at", default="2MiB")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--dir", default=None, help="work directory (default: a temporary one, removed after)")
    p.add_argument("--serve-s3", metavar="BUCKET", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.serve_s3:
        _serve_s3(a.serve_s3)
        return 0
    from walctl.sizes import parse_size

    capacity = parse_size(a.capacity)
    workdir = a.dir or tempfile.mkdtemp(prefix="walctl-chaos-")
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    loop = s3 = None
    try:
        device = a.device
        if a.loop:
            loop = device = attach_loop(os.path.join(workdir, "loop-backing.img"), capacity)
        if a.s3:
            s3 = S3Service()
        chaos = Chaos(workdir, device=device, store_url=s3.store_url if s3 else None, env=s3.env if s3 else None,
                      capacity=capacity, record_bytes=a.record_bytes, upload_at=a.upload_at, seconds=a.seconds,
                      seed=seed, spark_every=a.spark_every, proxy=s3)
        out = chaos.run()
        out.update(seed=seed, device="loop" if a.loop else ("given" if a.device else "file"),
                   store="s3" if a.s3 else "local")
        print(json.dumps(out), flush=True)
        return 0 if not out["problems"] else 1
    finally:
        if loop is not None:
            subprocess.run(["losetup", "-d", loop], check=False)
        if s3 is not None:
            s3.close()
        if a.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
