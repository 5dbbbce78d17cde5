"""Helpers shared by the WAL engine tests: build logs, damage them, read them back."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

from walctl.device import open_device
from walctl.format.batch import StreamRecordBatch
from walctl.format.header import HEADERS_SIZE, SHUTDOWN_UNGRACEFUL
from walctl.wal import reader
from walctl.wal.headers import read_headers, write_header
from walctl.wal.init import init_wal
from walctl.wal.lifecycle import open_writer
from walctl.wal.trim import trim_wal


def run_walctl(*args, stdin: bytes | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m walctl ARGS`` as its own process (stdout and stderr captured); ``env`` adds variables."""
    return subprocess.run([sys.executable, "-m", "walctl", *map(str, args)], capture_output=True, input=stdin,
                          env={**os.environ, **(env or {})}, timeout=120)


def payload_for(stream_id: int, base: int, size: int = 100) -> bytes:
    """A payload that is a pure function of (stream, offset): any mix-up or phantom shows."""
    seed = hashlib.sha256(f"{stream_id}:{base}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def new_wal(path, capacity: int) -> str:
    init_wal(str(path), capacity)
    return str(path)


def append_records(path: str, count: int, *, stream_id: int = 0, size: int = 100, iodepth: int = 4,
                   clean: bool = True, flush_each: bool = False) -> list[tuple[int, int]]:
    """Append ``count`` records; returns the acknowledged (offset, base_offset) pairs in order.

    clean=False leaves the header "ungraceful" (as after a crash), after every block is durable.
    """
    acks: list[tuple[int, int]] = []
    opened = open_writer(path, scan=True, iodepth=iodepth, on_ack=lambda off, base: acks.append((off, base)))
    writer = opened.writer
    base = opened.scan.stream_ends.get(stream_id, 0)
    for i in range(count):
        body = StreamRecordBatch(stream_id, 0, base + i, 1, payload_for(stream_id, base + i, size)).encode()
        writer.append(body, base + i)
        if flush_each:
            writer.submit_open_block()
    if clean:
        writer.close()
    else:
        writer.drain()
        writer.abort()
    return acks


def mixed_wrapped_wal(path, *, clean: bool) -> bytes:
    """The image of a wrapped 256 KiB WAL: three streams, small and large records, a bad batch, a
    trim point, a lap-end padding record before the second lap; closed cleanly or after a crash."""
    path = new_wal(path, 256 * 1024)
    first = append_records(path, 40, size=3000, iodepth=1, flush_each=True)
    trim_wal(path, first[37][0])
    w = open_writer(path, scan=True).writer
    for i in range(30):
        w.append(StreamRecordBatch(7 + i % 3, 0, 100 + i // 3, 1, bytes([i]) * (40 + 37 * i)).encode())
    w.append(b"not a batch at all")
    w.close()
    ring = 256 * 1024 - HEADERS_SIZE
    acks = []
    while not acks or acks[-1][0] < ring:  # on into the second lap (a lap-end padding record before it)
        acks = append_records(path, 1, size=5000, iodepth=2, flush_each=True, stream_id=1)
    append_records(path, 2, size=5000, iodepth=2, flush_each=True, clean=clean, stream_id=1)
    with open(path, "rb") as f:
        return f.read()


def scan_file(path: str, **kwargs):
    dev = open_device(path, writable=False)
    try:
        header = read_headers(dev).header
        return reader.run_scan(dev, header, **kwargs)
    finally:
        dev.close()


def header_of(path: str):
    dev = open_device(path, writable=False)
    try:
        return read_headers(dev)
    finally:
        dev.close()


def physical(path: str, offset: int) -> int:
    capacity = header_of(path).header.capacity
    return HEADERS_SIZE + offset % (capacity - HEADERS_SIZE)


def poke(path: str, position: int, data: bytes) -> None:
    """Overwrite bytes at a physical position (the damage a test injects)."""
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def mark_ungraceful(path: str) -> None:
    """The header a crashed writer leaves: the newest slot says shutdownType = 1."""
    dev = open_device(path, writable=True)
    try:
        state = read_headers(dev)
        write_header(dev, state, state.header.with_(shutdown_type=SHUTDOWN_UNGRACEFUL))
    finally:
        dev.close()


def damaged(image: bytes, rng, ring: int) -> bytes:
    """``image`` (a WAL file's bytes) with 1-3 random hits in its ring: a flipped bit, 512 zero
    bytes or 64 random bytes each."""
    image = bytearray(image)
    for _ in range(rng.randint(1, 3)):
        pos = HEADERS_SIZE + rng.randrange(ring)
        how = rng.randrange(3)
        if how == 0:
            image[pos] ^= 1 << rng.randrange(8)
        elif how == 1:
            image[pos:pos + 512] = bytes(len(image[pos:pos + 512]))
        else:
            image[pos:pos + 64] = rng.randbytes(len(image[pos:pos + 64]))
    return bytes(image)


def peek(path: str, position: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(position)
        return f.read(length)


def make_payload(trial: int, index: int, size: int) -> bytes:
    """A self-describing payload: tag + a fill derived from it, so a recovered one can be checked alone."""
    tag = f"{trial}:{index}:{size}:".encode()
    fill = hashlib.sha256(tag).digest()
    return tag + (fill * (size // 32 + 1))[:size]


def check_payload(payload: bytes) -> tuple[int, int]:
    """A recovered payload must be exactly what some feed produced (else: corrupt or phantom)."""
    trial, index, size, _ = payload.split(b":", 3)
    assert payload == make_payload(int(trial), int(index), int(size)), "corrupt or phantom payload recovered"
    return int(trial), int(index)
