#!/usr/bin/env python3
"""The piped append's ceiling without walctl (issue 31): stdin read into aligned buffers, written with
O_DIRECT | O_DSYNC native AIO at a block size and depth, no framing, CRC or acknowledgements.

    cat FILE | python bench/aio_ceiling.py DEVICE [--bs 192KiB] [--iodepth 4] [--repeat BYTES]

One thread, as fio runs: read a block's worth of stdin (readinto, the pipe enlarged to 1 MiB),
io_submit it, and reap completions (io_getevents) whenever every slot is busy. It writes from
offset 0 of DEVICE sequentially (wrapping at its end) and prints one JSON line: bytes, seconds,
MiB/s and its own CPU seconds (user + system). ``--repeat BYTES`` reads nothing: it writes the same
buffers (random bytes, filled once) until BYTES are written, the way fio's default buffers repeat
(a virtio disk may take repeated data faster than fresh data); with ``--fresh`` a counter is
stamped into each 4 KiB before each write (the same CPU, no 4 KiB ever repeats). It imports nothing of walctl, so
walctl's ratio against it is what the WAL logic costs over the language and the system calls.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import platform
import resource
import sys
import time

_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}  # io_setup, io_destroy, io_getevents, io_submit
F_SETPIPE_SZ = 1031


class IoCb(ctypes.Structure):
    _fields_ = [("aio_data", ctypes.c_uint64), ("aio_key", ctypes.c_uint32), ("aio_rw_flags", ctypes.c_int32),
                ("aio_lio_opcode", ctypes.c_uint16), ("aio_reqprio", ctypes.c_int16),
                ("aio_fildes", ctypes.c_uint32), ("aio_buf", ctypes.c_uint64), ("aio_nbytes", ctypes.c_uint64),
                ("aio_offset", ctypes.c_int64), ("aio_reserved2", ctypes.c_uint64), ("aio_flags", ctypes.c_uint32),
                ("aio_resfd", ctypes.c_uint32)]


class IoEvent(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64), ("res", ctypes.c_int64),
                ("res2", ctypes.c_int64)]


def parse_size(text: str) -> int:
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    low = text.strip().lower()
    for unit, factor in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if low.endswith(unit):
            return int(float(low[:-len(unit)]) * factor)
    return int(low)


def run(device: str, bs: int, depth: int, repeat: int = 0, fresh: bool = False) -> dict:
    nr_setup, nr_destroy, nr_getevents, nr_submit = _SYSCALLS[platform.machine()]
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    fd = os.open(device, os.O_WRONLY | os.O_DIRECT | os.O_DSYNC)
    size = os.lseek(fd, 0, os.SEEK_END) // bs * bs
    ctx = ctypes.c_ulong(0)
    if syscall(ctypes.c_long(nr_setup), ctypes.c_long(depth), ctypes.byref(ctx)) < 0:
        raise OSError(ctypes.get_errno(), "io_setup")
    bufs = [mmap.mmap(-1, bs) for _ in range(depth)]  # page-aligned
    if repeat:
        for b in bufs:
            b.write(os.urandom(bs))
    addrs = [ctypes.addressof(ctypes.c_char.from_buffer(b)) for b in bufs]
    views = [memoryview(b) for b in bufs]
    cbs = (IoCb * depth)()
    ptrs = [(ctypes.POINTER(IoCb) * 1)(ctypes.pointer(cb)) for cb in cbs]
    for i, cb in enumerate(cbs):
        cb.aio_data, cb.aio_lio_opcode, cb.aio_fildes, cb.aio_buf = i, 1, fd, addrs[i]
    events = (IoEvent * depth)()
    c_submit, c_get, c_one, c_depth = (ctypes.c_long(nr_submit), ctypes.c_long(nr_getevents), ctypes.c_long(1),
                                       ctypes.c_long(depth))
    stdin = sys.stdin.buffer.raw
    if not repeat:
        try:
            import fcntl

            fcntl.fcntl(stdin.fileno(), F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
    free, busy, offset, total, eof = list(range(depth)), 0, 0, 0, False
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    while True:
        while free and not eof:
            slot = free.pop()
            if repeat:
                n = min(bs, repeat - total)
                eof = total + n >= repeat
                if fresh:  # every 4 KiB of every write differs from all written before
                    stamp = (total // 4096).to_bytes(8, "little")
                    view = views[slot]
                    for page in range(0, n, 4096):
                        view[page:page + 8] = stamp
                        stamp = (int.from_bytes(stamp, "little") + 1).to_bytes(8, "little")
            else:
                n, view = 0, views[slot]
                while n < bs:
                    got = stdin.readinto(view[n:])
                    if not got:
                        eof = True
                        break
                    n += got
            if not n:
                free.append(slot)
                break
            length = -(-n // 4096) * 4096
            if offset + length > size:
                offset = 0
            cb = cbs[slot]
            cb.aio_nbytes, cb.aio_offset = length, offset
            if syscall(c_submit, ctx, c_one, ptrs[slot]) != 1:
                raise OSError(ctypes.get_errno(), "io_submit")
            offset += length
            total += n
            busy += 1
        if not busy:
            break
        got = syscall(c_get, ctx, c_one, c_depth, events, None)
        if got < 0:
            raise OSError(ctypes.get_errno(), "io_getevents")
        for i in range(got):
            if events[i].res < 0:
                raise OSError(-events[i].res, "write")
            free.append(events[i].data)
        busy -= got
    seconds = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    syscall(ctypes.c_long(nr_destroy), ctx)
    os.close(fd)
    cpu = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
    return {"bytes": total, "seconds": seconds, "mib_per_s": total / (1 << 20) / seconds, "cpu_s": cpu,
            "bs": bs, "iodepth": depth}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("device")
    parser.add_argument("--bs", default="192KiB")
    parser.add_argument("--iodepth", type=int, default=4)
    parser.add_argument("--repeat", default="0", help="write the same buffers until this many bytes (no stdin)")
    parser.add_argument("--fresh", action="store_true", help="with --repeat: stamp a counter into each 4 KiB "
                                                             "before its write, so no 4 KiB repeats")
    opts = parser.parse_args()
    print(json.dumps(run(opts.device, parse_size(opts.bs), opts.iodepth, parse_size(opts.repeat), opts.fresh)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
