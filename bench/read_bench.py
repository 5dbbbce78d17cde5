#!/usr/bin/env python3
"""Read benchmark: `walctl read` of one stream spread over many objects, against a raw read of
the same bytes, on the local store and on S3 (moto over HTTP).

    python bench/read_bench.py [--size 1GiB] [--objects 100] [--batch-bytes 64KiB]
        [--backends local,s3] [--rounds 5] [--dir DIR]

The store is generated directly (walctl objects of one stream, 1 MiB DataBlocks, and one
manifest commit naming them). Each backend is then read ``--rounds`` times, raw and walctl
interleaved (raw, walctl, raw, walctl, ...), each run a child process whose startup counts:
- raw: the same object bytes read sequentially, whole objects, with nothing decoded, by one
  process (local: O_DIRECT into one reused aligned buffer, the way the local store reads;
  S3: a GET of each whole object with boto3, the client walctl uses, bodies drained);
- walctl: `walctl read --store URL --stream 1 --json --payload none`, its summary giving GETs and
  bytes read; it reports its own peak RSS (VmHWM). It keeps up to two reads in flight (its read
  ahead); the raw reference reads one object after the other.
Both children write to files (the parent, which runs moto's server, only waits: it takes no GIL
time from the server while a reader runs), and cache their bytecode (in the work directory) as an
installed walctl does; a warm-up run before the timed ones fills that cache. Both read the same object bytes with the same cache
state (O_DIRECT locally: no page cache on either side; moto keeps its objects in memory).
Printed per backend: MiB/s of each over the objects' bytes; the headline ratio, raw time / walctl
time, is the median over the interleaved pairs (target >= 0.8), each pair a raw run and the walctl
run right after it, so a burst of load on a shared machine moves one pair, not the verdict; beside
it the ratio of the best runs (each side's fastest: what each does undisturbed, but the two best
runs may come from different moments) and every pair's ratio (their range). Then walctl's GETs
against the minimum (1 manifest + one GET per object: a Stream Object wanted whole is read in one
GET), the CPU seconds of each (user + sys, from wait4: what each costs even when a shared machine's
load makes the times wander), and the reader's peak RSS (target < 256 MiB).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from walctl.format.batch import StreamRecordBatch  # noqa: E402
from walctl.format.object import build_object  # noqa: E402
from walctl.sizes import format_size, parse_size  # noqa: E402
from walctl.store import manifest as mf  # noqa: E402

MiB = 1 << 20
STREAM = 1


def generate(store, size: int, objects: int, batch_bytes: int) -> tuple[int, int, list[dict]]:
    """``objects`` Stream Objects of one stream, ``size`` payload bytes in all; one commit names them."""
    per_object = size // objects
    batches_per_object = max(1, per_object // batch_bytes)
    payload = os.urandom(batch_bytes)
    made, offset, total = [], 0, 0
    ids = list(range(1, objects + 1))
    for oid in ids:
        batches = [StreamRecordBatch(STREAM, 0, offset + i, 1, payload) for i in range(batches_per_object)]
        built = build_object([(STREAM, batches)])
        key = mf.object_key(oid)
        store.put_large(key, built.data)
        made.append({"id": oid, "key": key, "kind": "SO", "size": len(built.data), "order_id": oid,
                     "data_time": time.time(), "ranges": [{"stream_id": STREAM, "start": offset,
                                                           "end": offset + batches_per_object,
                                                           "bytes": built.ranges[STREAM].size_bytes}]})
        offset += batches_per_object
        total += batches_per_object * batch_bytes

    def commit(m: mf.Manifest) -> None:
        m.next_object_id = objects + 1
        m.objects = [mf.LiveObject.from_json(o) for o in made]
        m.streams = {STREAM: mf.StreamSpan(0, offset)}

    mf.commit(store, commit, command="read_bench (generate)")
    return total, offset, made


PYCACHE: str | None = None  # set by main: the children's bytecode cache, inside the work directory


def child_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
    # Bytecode cached, as for an installed walctl (pip compiles it): with PYTHONDONTWRITEBYTECODE
    # from the environment, every run compiled walctl's modules again. The cache goes in the work
    # directory, not the source tree; main warms it before the timed runs.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if PYCACHE:
        env["PYTHONPYCACHEPREFIX"] = PYCACHE
    env.update(extra or {})
    return env


# The reader reports its own peak RSS (VmHWM) at exit: a forked child's ru_maxrss also counts the
# parent's pages it shared before exec (here: moto's store), so it cannot be used.
WRAPPER = ("import atexit, sys\n"
           "def hwm():\n"
           "    for line in open('/proc/self/status'):\n"
           "        if line.startswith('VmHWM:'):\n"
           "            sys.stderr.write('walctl-bench-hwm-kib ' + line.split()[1] + '\\n')\n"
           "atexit.register(hwm)\n"
           "from walctl.cli import main\n"
           "sys.argv = ['walctl'] + sys.argv[1:]\n"
           "main()\n")


def run_child(argv: list[str], env: dict, work: str) -> tuple[float, bytes, bytes]:
    """(seconds, stdout, stderr) of ``python ARGV``, its output in files: the parent only waits.
    Its CPU seconds (user + sys, threads included; from wait4) go to LAST_CPU."""
    global LAST_CPU
    with tempfile.TemporaryFile(dir=work) as out, tempfile.TemporaryFile(dir=work) as err:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, *argv], stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        LAST_CPU = usage.ru_utime + usage.ru_stime
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:5])}... exited {proc.returncode}: {stderr.decode()[-500:]}")
    return seconds, stdout, stderr


LAST_CPU = 0.0


def walctl_read(url: str, env: dict, work: str) -> dict:
    argv = ["-c", WRAPPER, "read", "--store", url, "--stream", str(STREAM), "--json", "--payload", "none"]
    seconds, out, err = run_child(argv, env, work)
    hwm = [int(line.split()[1]) for line in err.decode().splitlines() if line.startswith("walctl-bench-hwm-kib ")]
    lines = out.splitlines()
    summary = json.loads(lines[-1])
    records = sum(1 for line in lines if line.startswith(b'{"type":"record"'))
    return {"seconds": seconds, "summary": summary, "records": records, "rss": hwm[-1] * 1024,
            "bytes": summary["bytes_read"], "cpu": LAST_CPU}


# The raw local reader: every object whole, O_DIRECT (as the local store reads), into one aligned
# buffer reused for every read; nothing decoded, nothing written.
RAW_LOCAL = ("import mmap, os, sys\n"
             "buf = mmap.mmap(-1, 16 << 20)\n"
             "total = 0\n"
             "for path in sys.argv[1:]:\n"
             "    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)\n"
             "    pos = 0\n"
             "    while (got := os.preadv(fd, [buf], pos)) > 0:\n"
             "        pos += got\n"
             "    os.close(fd)\n"
             "    total += pos\n"
             "print(total)\n")

# The raw S3 reader: one GET of each whole object with boto3 (the client walctl uses), bodies drained.
RAW_S3 = ("import os, sys, boto3\n"
          "client = boto3.session.Session().client('s3', endpoint_url=os.environ['AWS_ENDPOINT_URL'])\n"
          "bucket, total = sys.argv[1], 0\n"
          "for key in sys.argv[2:]:\n"
          "    body = client.get_object(Bucket=bucket, Key=key)['Body']\n"
          "    while chunk := body.read(16 << 20):\n"
          "        total += len(chunk)\n"
          "print(total)\n")


def raw_local(root: str, made: list[dict], work: str) -> dict:
    paths = [os.path.join(root, o["key"]) for o in made]
    seconds, out, _ = run_child(["-c", RAW_LOCAL, *paths], child_env(), work)
    return {"seconds": seconds, "bytes": int(out), "cpu": LAST_CPU}


def raw_s3(env: dict, bucket: str, prefix: str, made: list[dict], work: str) -> dict:
    keys = [f"{prefix}/{o['key']}" for o in made]
    seconds, out, _ = run_child(["-c", RAW_S3, bucket, *keys], env, work)
    return {"seconds": seconds, "bytes": int(out), "cpu": LAST_CPU}


def report(name: str, payload: int, objects: int, raws: list[dict], reads: list[dict]) -> None:
    raw = min(raws, key=lambda r: r["seconds"])
    best = min(reads, key=lambda r: r["seconds"])
    obj_bytes = raw["bytes"]
    pairs = [r["seconds"] / w["seconds"] for r, w in zip(raws, reads)]
    median = statistics.median(pairs)
    s = best["summary"]
    design_min = 1 + 2 * objects
    raw_runs = ", ".join(f"{r['seconds']:.2f}" for r in raws)
    read_runs = ", ".join(f"{r['seconds']:.2f}" for r in reads)
    print(f"\n[{name}] {format_size(payload)} payload in {objects} objects ({format_size(obj_bytes)}), "
          f"{best['records']} batches read")
    print(f"  raw sequential read of the objects:   {obj_bytes / MiB / raw['seconds']:8.1f} MiB/s  "
          f"({raw['seconds']:.2f} s; runs: {raw_runs} s)")
    print(f"  walctl read (process, startup incl.): {obj_bytes / MiB / best['seconds']:8.1f} MiB/s  "
          f"({best['seconds']:.2f} s; runs: {read_runs} s; payload {payload / MiB / best['seconds']:.1f} MiB/s)")
    print(f"  ratio walctl / raw, median of {len(pairs)} interleaved pairs: {median:.2f}  (target >= 0.8); "
          f"best runs: {raw['seconds'] / best['seconds']:.2f}; pairs: {', '.join(f'{x:.2f}' for x in pairs)} "
          f"(range {min(pairs):.2f}-{max(pairs):.2f}); load {os.getloadavg()[0]:.1f}")
    print(f"  GETs: {s['gets']} (+{s['lists']} LIST), {s['block_gets']} of them for block runs; minimum "
          f"{objects + 1} (the manifest + one GET per object); tail + blocks per object would be {design_min}")
    print(f"  bytes read: {format_size(s['bytes_read'])} for {format_size(payload)} of payload "
          f"({s['bytes_read'] / max(obj_bytes, 1):.4f} x the objects' bytes)")
    print(f"  CPU seconds (user + sys, median of {len(reads)}): walctl {statistics.median(r['cpu'] for r in reads):.2f}, "
          f"raw {statistics.median(r['cpu'] for r in raws):.2f} (on a loaded machine: what each costs, whatever the waits)")
    print(f"  peak RSS of the reader: {max(r['rss'] for r in reads) / MiB:.1f} MiB, worst of {len(reads)} "
          "(target < 256 MiB)")
    if s["findings"] or best["records"] != s["records"]:
        raise SystemExit(f"read reported {s['findings']} findings / {best['records']} records: not a clean run")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="1GiB", help="payload bytes of the stream (default 1GiB)")
    p.add_argument("--objects", type=int, default=100, help="objects the stream is spread over (default 100)")
    p.add_argument("--batch-bytes", default="64KiB", help="payload per batch (default 64KiB)")
    p.add_argument("--backends", default="local,s3", help="comma-separated: local, s3 (moto over HTTP)")
    p.add_argument("--rounds", type=int, default=5,
                   help="interleaved raw/walctl rounds per backend (default 5; the headline is their median)")
    p.add_argument("--dir", default=None, help="where the local store goes (default: a temp dir, removed)")
    args = p.parse_args()
    size, batch = parse_size(args.size), parse_size(args.batch_bytes)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    work = tempfile.mkdtemp(prefix="walctl-read-bench-", dir=args.dir)
    global PYCACHE
    PYCACHE = os.path.join(work, "pycache")
    try:
        if "local" in backends:
            from walctl.store import LocalStore

            root = os.path.join(work, "store")
            store = LocalStore(root)
            t = time.monotonic()
            payload, _, made = generate(store, size, args.objects, batch)
            print(f"local store generated in {time.monotonic() - t:.1f} s at {root}")
            raws, reads = [], []
            walctl_read(root, child_env(), work)  # warm-up: fills the bytecode cache
            for _ in range(args.rounds):
                raws.append(raw_local(root, made, work))
                reads.append(walctl_read(root, child_env(), work))
            report("local store", payload, args.objects, raws, reads)
            shutil.rmtree(root)
        if "s3" in backends:
            import boto3
            import logging

            from moto.server import ThreadedMotoServer

            from walctl.store import S3Store

            env = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
                   "AWS_EC2_METADATA_DISABLED": "true"}
            os.environ.update(env)
            logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            server.start()
            try:
                host, port = server.get_host_and_port()
                endpoint = f"http://{host}:{port}"
                boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
                store = S3Store("bench", "read", endpoint_url=endpoint)
                t = time.monotonic()
                payload, _, made = generate(store, size, args.objects, batch)
                print(f"moto store generated in {time.monotonic() - t:.1f} s at {endpoint}")
                raws, reads = [], []
                s3_env = child_env({**env, "AWS_ENDPOINT_URL": endpoint})
                raw_s3(s3_env, "bench", "read", made[:1], work)  # warm-up of each child's imports
                walctl_read("s3://bench/read", s3_env, work)
                for _ in range(args.rounds):
                    raws.append(raw_s3(s3_env, "bench", "read", made, work))
                    reads.append(walctl_read("s3://bench/read", s3_env, work))
                report("S3 (moto over HTTP)", payload, args.objects, raws, reads)
            finally:
                server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
