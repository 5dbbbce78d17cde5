#!/usr/bin/env python3
"""SO compaction benchmark: a store of Stream Objects for a skewed stream mix, merged by
server-side copy; throughput against a plain copy of the same bytes, peak RSS, requests,
and the bytes that went through the compactor (target: < 5 % of the data on S3).

    python bench/so_compact_bench.py [--total 512MiB] [--streams 12] [--target 256MiB]
        [--backend local|s3|both] [--small-share 0.05] [--dir DIR]

The stream mix is skewed (stream k gets a share proportional to 1/(k+1)); each stream's data
is cut into SOs of 8-48 MiB (what SSO compaction and uploads leave behind), plus, with
``--small-share`` (default 2 %), SOs of 1-4 MiB, below S3's 5 MiB part minimum, for that share
of the data, at random places: those must be read and re-put on S3 (the floor of what goes
through the compactor there). S3 is a moto server in a child process (``moto_server``), over
HTTP on 127.0.0.1, so its memory is not counted in the compactor's RSS.

The plain copy: local, ``shutil.copyfile`` of every source object (copy_file_range, as the
compactor's); S3, one CopyObject per source object (server-side, as UploadPartCopy).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from walctl.compaction.so import compact_stream_objects  # noqa: E402
from walctl.format.batch import StreamRecordBatch  # noqa: E402
from walctl.format.object import build_object  # noqa: E402
from walctl.sizes import format_size, parse_size  # noqa: E402
from walctl.store import LocalStore, S3Store  # noqa: E402
from walctl.store import manifest as mf  # noqa: E402

MiB = 1 << 20
BATCH_BYTES = 256 << 10


class PeakRss(threading.Thread):
    """Largest resident set of this process, sampled every 20 ms."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak = 0
        self.stop = threading.Event()

    def run(self):
        page = os.sysconf("SC_PAGE_SIZE")
        while not self.stop.is_set():
            with open("/proc/self/statm") as f:
                self.peak = max(self.peak, int(f.read().split()[1]) * page)
            time.sleep(0.02)


def so_sizes(total: int, streams: int, small_share: float, rng: random.Random) -> dict[int, list[int]]:
    weights = [1 / (k + 1) for k in range(streams)]
    scale = total / sum(weights)
    out: dict[int, list[int]] = {}
    for sid in range(streams):
        left = int(weights[sid] * scale)
        small = int(left * small_share)
        sizes = []
        while left - small > 0:
            n = min(left - small, rng.randint(8, 40) * MiB)
            if sizes and n < 8 * MiB:
                sizes[-1] += n  # no tiny remainder: SSO compaction cuts SOs of >= --split-size
            else:
                sizes.append(n)
            left -= n
        while small > 0:
            n = min(small, rng.randint(1, 4) * MiB)
            sizes.insert(rng.randrange(len(sizes) + 1), n)
            small -= n
        out[sid] = sizes
    return out


def generate(store, sizes: dict[int, list[int]]) -> int:
    """One SO per size, offsets contiguous per stream; returns the data bytes."""
    chunk = os.urandom(BATCH_BYTES)
    made, oid, total = [], 1, 0
    for sid, lengths in sizes.items():
        offset = 0
        for length in lengths:
            batches = []
            for i in range(max(1, length // BATCH_BYTES)):
                batches.append(StreamRecordBatch(sid, 0, offset, 1, chunk))
                offset += 1
            built = build_object([(sid, batches)])
            key = mf.object_key(oid)
            store.put_large(key, built.data)
            r = built.ranges[sid]
            made.append({"id": oid, "key": key, "kind": "SO", "size": len(built.data), "order_id": oid,
                         "data_time": time.time(),
                         "ranges": [{"stream_id": sid, "start": r.start_offset, "end": r.end_offset,
                                     "bytes": r.size_bytes}]})
            total += r.size_bytes
            oid += 1

    def add(m):
        m.next_object_id = oid
        m.objects.extend(mf.LiveObject.from_json(o) for o in made)
        for o in made:
            r = o["ranges"][0]
            s = m.streams.setdefault(r["stream_id"], mf.StreamSpan(r["start"], r["end"]))
            s.end = max(s.end, r["end"])

    mf.commit(store, add, command="bench generate")
    return total


def plain_copy_seconds(store, doc) -> float:
    started = time.monotonic()
    for o in doc.objects:
        if isinstance(store, LocalStore):
            src = os.path.join(store.root, *o.key.split("/"))
            shutil.copyfile(src, src + ".benchcopy")
        else:
            store.client.copy_object(Bucket=store.bucket, Key=f"{store.prefix}/{o.key}.benchcopy",
                                     CopySource={"Bucket": store.bucket, "Key": f"{store.prefix}/{o.key}"})
    seconds = time.monotonic() - started
    for o in doc.objects:
        if isinstance(store, LocalStore):
            os.unlink(os.path.join(store.root, *o.key.split("/")) + ".benchcopy")
        else:
            store.client.delete_object(Bucket=store.bucket, Key=f"{store.prefix}/{o['key']}.benchcopy")
    return seconds


def run(backend: str, store, args, sizes) -> None:
    print(f"\n== {backend} ==", flush=True)
    started = time.monotonic()
    data = generate(store, sizes)
    doc = mf.load_latest(store)
    print(f"generated {len(doc.objects)} SOs of {args.streams} streams, {format_size(data)} of data "
          f"in {time.monotonic() - started:.1f} s", flush=True)
    copy_s = plain_copy_seconds(store, doc)
    store.stats.reset()
    sampler = PeakRss()
    rss_before = 0
    with open("/proc/self/statm") as f:
        rss_before = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    sampler.start()
    out = compact_stream_objects(store, target_size=parse_size(args.target)).to_json()
    sampler.stop.set()
    sampler.join()
    through = out["through_read_bytes"] + out["through_written_bytes"] + out["crc_read_bytes"]
    small = sum(o.ranges[0].bytes for o in doc.objects if o.ranges[0].bytes < 5 * MiB)
    after = len(mf.load_latest(store).objects)
    print(f"SO compaction: {out['objects_in']} SOs in, {out['objects_out']} out ({after} live objects now), "
          f"{out['seconds']:.2f} s = {data / MiB / out['seconds']:.0f} MiB/s of data; "
          f"plain copy of the same objects {copy_s:.2f} s = {data / MiB / copy_s:.0f} MiB/s "
          f"(ratio {out['seconds'] / copy_s:.2f})")
    print(f"  copied server-side {format_size(out['bytes_copied'])} in {out['copy_parts']} copy parts; "
          f"through the compactor: read {format_size(out['through_read_bytes'])}, written "
          f"{format_size(out['through_written_bytes'])} (indexes+footers "
          f"{format_size(out['output_bytes'] - out['data_bytes'])}): object bytes through it "
          f"{100 * (out['through_read_bytes'] + out['crc_read_bytes']) / data:.2f} % of the data "
          f"(in + out: {100 * through / data:.2f} %); small SOs (< 5 MiB, cannot be copied parts) "
          f"{format_size(small)}")
    print(f"  requests: {out['gets']} GETs (index reads: {out['objects_in']}), {out['puts']} PUTs, "
          f"{out['upload_parts']} upload parts; peak RSS {format_size(sampler.peak)} "
          f"(+{format_size(max(0, sampler.peak - rss_before))} during the run)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total", default="512MiB")
    p.add_argument("--streams", type=int, default=12)
    p.add_argument("--target", default="256MiB")
    p.add_argument("--backend", choices=("local", "s3", "both"), default="both")
    p.add_argument("--small-share", type=float, default=0.02)
    p.add_argument("--dir", default=None, help="where the local store goes (default: a temporary directory)")
    args = p.parse_args()
    sizes = so_sizes(parse_size(args.total), args.streams, args.small_share, random.Random(7))
    if args.backend in ("local", "both"):
        base = tempfile.mkdtemp(prefix="so-bench-", dir=args.dir)
        try:
            run("local store", LocalStore(os.path.join(base, "store")), args, sizes)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    if args.backend in ("s3", "both"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(os.environ, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                   AWS_DEFAULT_REGION="us-east-1")
        os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")})
        server = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "moto_server"), "-H", "127.0.0.1",
                                   "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        try:
            endpoint = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.1)
            store = S3Store("bench", "so", endpoint_url=endpoint)
            store.client.create_bucket(Bucket="bench")
            run(f"S3 (moto over HTTP, {endpoint})", store, args, sizes)
        finally:
            server.terminate()
            server.wait(timeout=20)


if __name__ == "__main__":
    main()
