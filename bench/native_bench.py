#!/usr/bin/env python3
"""Per-record cost of the record format's loops: one record at a time in Python, the bulk
Python twins (walctl.format.bulk, WALCTL_NO_NATIVE), and the C extension (issue 19).

    .venv/bin/python bench/native_bench.py [--sizes 100,1024,65536] [--buffer-mib 4] [--rounds 3]

For each record size a buffer of --buffer-mib MiB is decoded (records -> rows), encoded
(payloads -> records with StreamRecordBatch headers), split (length-prefixed input ->
spans) and read as append reads its input (walctl.wal.framing.records); each line prints ns per record, MB/s of record bytes, and ratios: against a memcpy
of the same buffer, against CRC-32C of it alone (the floor for decode and encode), and the
C path's speed-up over Python. Times are machine-dependent: read the ratios. Pure memory
work, no device; a few seconds per size.
"""

from __future__ import annotations

import argparse
import io
import json
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from walctl.format import batch as batch_format  # noqa: E402
from walctl.format import bulk  # noqa: E402
from walctl.format import record as rec  # noqa: E402
from walctl.format.batch import StreamRecordBatch  # noqa: E402
from walctl.format.crc import crc32c  # noqa: E402
from walctl.wal import framing  # noqa: E402
from walctl.wal.framing import Framing  # noqa: E402


def best(fn, rounds: int) -> float:
    """Fastest of ``rounds`` runs, in seconds (each run long enough to time: >= 50 ms)."""
    times = []
    for _ in range(rounds):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            took = time.perf_counter() - start
            if took >= 0.05:
                break
        times.append(took / n)
    return min(times)


def python_decode(buf, base):
    """The scan's one-record fast path today (LogReader.data_record + _batch_of), per record."""
    unpack, bunpack, view = rec.STRUCT.unpack_from, batch_format.STRUCT.unpack_from, memoryview(buf)
    pos, end, out = 0, len(buf), []
    while pos < end:
        magic, length, body_offset, body_crc, stored = unpack(buf, pos)
        if magic != rec.DATA_MAGIC or body_offset != base + pos + 24 or length <= 0:
            break
        if crc32c(view[pos:pos + 20]) != stored:
            break
        body = view[pos + 24:pos + 24 + length]
        if crc32c(body) != body_crc:
            break
        body = bytes(body)
        m, sid, epoch, b, count, plen = bunpack(body)
        out.append(StreamRecordBatch(sid, epoch, b, count, body[33:]))
        pos += 24 + length
    return out


def python_encode(buf, payloads, offset):
    """What append + WalWriter.append do per record today: batch header + payload, then the record header."""
    pack_head, pos = batch_format.STRUCT.pack, 0
    for i, payload in enumerate(payloads):
        body = pack_head(batch_format.MAGIC, 1, 0, i, 1, len(payload)) + payload
        rec.pack_data_header_into(buf, pos, offset + pos, body)
        buf[pos + 24:pos + 24 + len(body)] = body
        pos += 24 + len(body)
    return pos


def python_split(data):
    """The length-prefixed loop before issue 19: a prefix parse and a bytes copy per record."""
    view, pos, end, out = memoryview(data), 0, len(data), []
    while pos + 4 <= end:
        stop = pos + 4 + int.from_bytes(view[pos:pos + 4], "big")
        if stop > end:
            break
        out.append(bytes(view[pos + 4:stop]))
        pos = stop
    return out


def _old_records(source):
    """append's length-prefixed reader before issue 19 (walctl/commands/append.py _records)."""
    buf = bytearray()
    while True:
        chunk = source.read1(1 << 20)
        if not chunk:
            return
        buf += chunk
        pos, end = 0, len(buf)
        with memoryview(buf) as view:
            while pos + 4 <= end:
                stop = pos + 4 + int.from_bytes(view[pos:pos + 4], "big")
                if stop > end:
                    break
                yield bytes(view[pos + 4:stop])
                pos = stop
        del buf[:pos]


def _consume(payloads) -> int:
    total = 0
    for payload in payloads:
        total += len(payload)
    return total


def with_python(fn):
    def run():
        saved = bulk._native
        bulk._native = None
        try:
            return fn()
        finally:
            bulk._native = saved
    return run


def bench_size(size: int, buffer_bytes: int, rounds: int) -> list[tuple]:
    count = max(1, buffer_bytes // (size + 24 + 33))
    payloads = [bytes([i % 251]) * size for i in range(count)]
    block = bytearray(count * (size + 24 + 33))
    base = 1 << 30
    n, end = bulk.pack_records(block, 0, len(block), base, payloads, batch=(1, 0, 0))
    assert n == count and end == len(block)
    data = bytes(block)
    framed = b"".join(struct.pack(">I", len(p)) + p for p in payloads)
    out = bytearray(len(block))

    copy = bytearray(len(data))
    memcpy = best(lambda: copy.__setitem__(slice(None), data), rounds) or 1e-9  # one memcpy of the buffer
    crc_only = best(lambda: crc32c(data), rounds) or 1e-9
    cases = {
        "decode": (len(data), {
            "python, per record": lambda: python_decode(data, base),
            "bulk, python": with_python(lambda: bulk.decode_records(data, base)),
            "bulk, C": lambda: bulk.decode_records(data, base),
        }),
        "encode": (len(data), {
            "python, per record": lambda: python_encode(out, payloads, base),
            "bulk, python": with_python(lambda: bulk.pack_records(out, 0, len(out), base, payloads, batch=(1, 0, 0))),
            "bulk, C": lambda: bulk.pack_records(out, 0, len(out), base, payloads, batch=(1, 0, 0)),
        }),
        "split": (len(framed), {
            "python, per record": lambda: python_split(framed),
            "bulk, python": with_python(lambda: bulk.split_length_prefixed(framed)),
            "bulk, C": lambda: bulk.split_length_prefixed(framed),
        }),
        # append's whole input path: a 1 MiB read at a time, every payload handed out (a
        # memoryview slice) to a loop that only takes its length.
        "records": (len(framed), {
            "python, per record": lambda: _consume(_old_records(io.BytesIO(framed))),
            "bulk, python": with_python(lambda: _consume(framing.records(io.BytesIO(framed), Framing.length_prefixed))),
            "bulk, C": lambda: _consume(framing.records(io.BytesIO(framed), Framing.length_prefixed)),
        }),
    }
    rows = []
    for op, (nbytes, impls) in cases.items():
        times = {name: best(fn, rounds) for name, fn in impls.items()}
        for name, took in times.items():
            rows.append((size, op, name, took / count * 1e9, nbytes / took / 1e6, memcpy / took, crc_only / took,
                         times["python, per record"] / took))
    return rows


def scan_compare(size: int, wal_mib: int, rounds: int) -> tuple:
    """A WAL file of ``wal_mib`` MiB of ``size``-byte records (written by walctl append): the
    recovery scan of today (walctl.wal.reader.scan) against 1 MiB preads + decode_records, and
    a plain pread of the same bytes (page cache: the CPU cost only). -> (records, and the three
    times, and append's records/s)."""
    import os
    import subprocess
    import tempfile

    from walctl.device import open_device
    from walctl.wal.layout import Ring
    from walctl.wal.lifecycle import init_wal, read_wal_state
    from walctl.wal.reader import ScanResult, scan

    with tempfile.TemporaryDirectory() as tmp:
        wal = os.path.join(tmp, "wal")
        init_wal(wal, (wal_mib + 16) << 20)
        count = (wal_mib << 20) // (size + 24 + 33 + 4)
        framed = b"".join(struct.pack(">I", size) + bytes([i % 251]) * size for i in range(count))
        out = subprocess.run([sys.executable, "-m", "walctl", "append", wal, "--input", "-", "--framing",
                              "length-prefixed", "--json"], input=framed, check=True, capture_output=True)
        summary = json.loads(out.stdout.splitlines()[-1])
        append_rate = summary["records"] / summary["seconds"]  # walctl's own clock: no interpreter start
        dev = open_device(wal, writable=False)
        try:
            header = read_wal_state(dev, wal).header
            ring = Ring(header.capacity, header.block_size)
            res = ScanResult(header, ring)

            def today():
                return sum(1 for _ in scan(dev, header, result=ScanResult(header, ring)))

            assert today() >= count
            list(scan(dev, header, result=res))
            end = res.end_offset
            fd = os.open(wal, os.O_RDONLY)

            def plain():
                for o in range(0, end, 1 << 20):
                    os.pread(fd, min(1 << 20, end - o), 8192 + o)

            def bulk_scan():
                records = payload = 0
                ends = {}
                o = 0
                while o < end:
                    chunk = os.pread(fd, min(1 << 20, end - o), 8192 + o)
                    got = bulk.decode_records(chunk, o, align=4096)
                    rows = got.rows
                    records += got.count
                    payload += sum(rows[2::bulk.ROW]) - 33 * got.count
                    ends.update(zip(rows[4::bulk.ROW], rows[6::bulk.ROW]))
                    if got.stop.clean or got.stop.pos == 0:
                        o += len(chunk) if got.stop.clean else 4096
                    else:
                        o += got.stop.pos  # a record cut by the chunk's end: read again from it
                return records, payload, ends

            records, _, _ = bulk_scan()
            assert records == res.records, (records, res.records)
            times = (best(today, rounds), best(bulk_scan, rounds), best(plain, rounds))
            os.close(fd)
        finally:
            dev.close()
    return (res.records, *times, append_rate)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1024,65536", help="payload sizes in bytes, comma-separated")
    parser.add_argument("--buffer-mib", type=float, default=4.0, help="MiB of records per buffer")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per case (the fastest counts)")
    parser.add_argument("--scan-mib", type=int, default=16,
                        help="MiB of records in the scan comparison's WAL (0: skip it)")
    args = parser.parse_args(argv)
    if not bulk.NATIVE:
        print("walctl.format._native is not built (or WALCTL_NO_NATIVE is set): 'bulk, C' runs the Python twins",
              file=sys.stderr)
    print(f"CRC-32C in C: {bulk.CRC_IMPL}; buffer {args.buffer_mib} MiB; fastest of {args.rounds}")
    print(f"{'size':>6} {'op':<7} {'impl':<19} {'ns/rec':>9} {'MB/s':>8} {'x memcpy':>9} {'x crc':>7} {'x python':>9}")
    for size in (int(s) for s in args.sizes.split(",")):
        for row in bench_size(size, int(args.buffer_mib * (1 << 20)), args.rounds):
            print(f"{row[0]:>6} {row[1]:<7} {row[2]:<19} {row[3]:>9.1f} {row[4]:>8.0f} {row[5]:>9.3f} {row[6]:>7.3f} "
                  f"{row[7]:>9.1f}")
    if args.scan_mib:
        print(f"\nscan of a {args.scan_mib} MiB WAL file (page cache): the scan of today vs 1 MiB preads + "
              "decode_records, against preads alone")
        print(f"{'size':>6} {'records':>8} {'scan rec/s':>11} {'bulk rec/s':>11} {'scan x read':>12} "
              f"{'bulk x read':>12} {'append rec/s':>13}")
        for size in (int(s) for s in args.sizes.split(",")):
            records, today, fast, plain, append_rate = scan_compare(size, args.scan_mib, args.rounds)
            print(f"{size:>6} {records:>8} {records / today:>11.0f} {records / fast:>11.0f} {plain / today:>12.3f} "
                  f"{plain / fast:>12.3f} {append_rate:>13.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
