#!/usr/bin/env python3
"""Piped `walctl append` against fio at walctl's own write size, and the pipe's own ceiling (issue 31).

    python bench/append_bench.py [--records 64KiB,4KiB,1KiB,100B] [--data 1GiB] [--size 2GiB]
        [--rounds 1] [--duration 5] [--dir /var/tmp] [--ack records|ranges] [--profile DIR] [--input-file]
        [--compare OTHER_TREE] [--startup-runs 5]

On a loop device (--direct-io=on) over a prewritten file, for each record size:
  walctl   `cat FILE | walctl append DEV --stream 1 --input - --framing length-prefixed --json
           > /dev/shm/acks` (a fresh `walctl init --force` before each run); its summary line
           gives the blocks written and the stages;
  fio      `fio --rw=write --bs=<walctl's average write, 4 KiB multiple> --iodepth=4 --direct=1
           --sync=dsync --ioengine=libaio` on the same device, right after;
  pipe     `cat FILE | <a bare reader>`: readinto a 1 MiB buffer, default pipe size, then with
           F_SETPIPE_SZ at 1 MiB: the ceiling of the pipe itself on this machine, this run;
  bare     `cat FILE | python bench/aio_ceiling.py DEV --bs <fio's bs> --iodepth <walctl's>`: the same pipe
           read into aligned buffers and written with the same O_DIRECT | O_DSYNC AIO, no walctl (no
           framing, CRC or acknowledgements): walctl's ratio to it ("w/bare") is what the WAL logic
           costs over the language and the system calls;
  fresh    fio again with --refill_buffers: fio's default buffers repeat, and a virtio disk may
           take repeated data faster; walctl's blocks never repeat;
  @depth   fio again at walctl's own --iodepth (its default 6, or WALCTL_IODEPTH): the issue's
           reference is fio at depth 4, this column says what the deeper queue alone gives the disk;
  file     (--input-file) `walctl append DEV ... --input FILE` (no pipe), its CPU s/GiB and stages
           printed below the table; with --compare, the other tree's right after (A/B);
  start-up an empty piped append's CPU and wall seconds, of this tree and of --compare's (median of
           --startup-runs, 5).
It prints walctl's payload MiB/s and records/s, the ratio to fio's MiB/s (payload / fio
device bytes, as the issue's table), the pipe ceiling's ratio to fio, p99 of a block's
time from its first record to durable (the acknowledgement latency, ack rendering aside),
and the per-stage breakdown the summary reports (µs per MiB of payload: stdin read,
framing, packing + CRC, queue, submit, completion, flush, ack rendering).
--profile DIR runs py-spy (if installed) on each walctl run and writes its top functions.
walctl runs with its bytecode cached (PYTHONPYCACHEPREFIX in the bench's directory, warmed by one
empty append per tree before the first timed run), as an installed walctl has it: a
PYTHONDONTWRITEBYTECODE environment would otherwise compile every walctl module at each start.
The machine is shared: compare the ratios (walctl and fio in the same run), not the MiB/s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, REPO_ROOT)

from walctl.sizes import parse_size  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
ACKS = "/dev/shm/walctl-append-bench-acks"
F_SETPIPE_SZ = 1031

# A bare reader of its stdin pipe: what a perfect consumer of the same pipe gets.
PIPE_READER = r"""
import fcntl, os, sys, time
size = int(sys.argv[1])
if size:
    try:
        fcntl.fcntl(0, 1031, size)
    except OSError:
        pass
buf = bytearray(1 << 20)
view = memoryview(buf)
total = 0
t = time.perf_counter()
while True:
    n = sys.stdin.buffer.raw.readinto(view)
    if not n:
        break
    total += n
print(total, time.perf_counter() - t)
"""


def make_input(path: str, record: int, payload_bytes: int) -> int:
    """A length-prefixed input of ``record``-byte random payloads, about ``payload_bytes``; returns records."""
    count = max(1, payload_bytes // record)
    per_chunk = max(1, (4 * MiB) // (record + 4))
    chunk = b"".join(record.to_bytes(4, "big") + os.urandom(record) for _ in range(min(per_chunk, count)))
    written = 0
    with open(path, "wb") as f:
        while written < count:
            n = min(per_chunk, count - written)
            f.write(chunk[:n * (record + 4)])
            written += n
        # On disk before the first timed run: its writeback would compete with that run's writes
        # (the same disk under the loop device), and this tree's run always comes first.
        f.flush()
        os.fsync(f.fileno())
    return count


def walctl_depth(file: bool = False) -> int:
    """walctl's own queue depth, as its runs will see it: WALCTL_IODEPTH, else append's default (for a
    regular file's input when ``file``: walctl.defaults.FILE_IODEPTH)."""
    from walctl.defaults import DEFAULT_IODEPTH, FILE_IODEPTH

    return int(os.environ.get("WALCTL_IODEPTH") or (FILE_IODEPTH if file else DEFAULT_IODEPTH))


def walctl_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "walctl", *args]


# The environment of the walctl runs: bytecode cached (see the module doc), set by main().
WALCTL_ENV: dict | None = None


def walctl_env(pycache: str) -> dict:
    """os.environ with walctl's bytecode written to and read from ``pycache``."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def init(dev: str, root: str = REPO_ROOT) -> None:
    subprocess.run(walctl_cmd("init", dev, "--force", "--discard-unuploaded"), check=True, capture_output=True,
                   cwd=root, env=WALCTL_ENV)


def warm_up(dev: str, root: str) -> None:
    """One empty append of the tree at ``root``: its modules' bytecode is cached before the timed runs."""
    init(dev, root)
    subprocess.run(walctl_cmd("append", dev, "--stream", "1", "--input", "-", "--framing", "length-prefixed",
                              "--json"), input=b"", check=True, capture_output=True, cwd=root, env=WALCTL_ENV)


def run_append(dev: str, inp: str, piped: bool, ack: str, profile: str | None, root: str = REPO_ROOT) -> dict:
    """One append run of the walctl tree at ``root`` (``python -m walctl`` from there); its summary plus wall seconds."""
    init(dev, root)
    extra = ["--ack", ack] if ack != "records" else []
    source = "-" if piped else inp
    args = walctl_cmd("append", dev, "--stream", "1", "--input", source, "--framing", "length-prefixed",
                      "--json", *extra)
    if profile:
        spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
        if os.path.exists(spy):
            args = [spy, "record", "--format", "raw", "--rate", "250", "--nonblocking", "-o", profile, "--",
                    *args]
    cpu_file = ACKS + ".cpu"
    if not profile and os.path.exists("/usr/bin/time"):  # walctl's own CPU seconds (user + system)
        args = ["/usr/bin/time", "-f", "%U %S", "-o", cpu_file, *args]
    cmd = " ".join(map(_quote, args)) + f" > {ACKS}"
    if piped:
        cmd = f"cat {_quote(inp)} | " + cmd
    started = time.perf_counter()
    proc = subprocess.run(["bash", "-c", "set -o pipefail; " + cmd], capture_output=True, text=True, cwd=root,
                          env=WALCTL_ENV)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"walctl append failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    with open(ACKS, "rb") as f:
        f.seek(max(0, os.path.getsize(ACKS) - 65536))
        tail = f.read().splitlines()
    # the last summary line (py-spy, when profiling, writes its own lines after it)
    summary = json.loads(next(line for line in reversed(tail) if line.startswith(b'{"type":"summary"')))
    summary["wall_s"] = wall
    summary["ack_bytes"] = os.path.getsize(ACKS)
    summary["cpu_s"] = None
    if os.path.exists(cpu_file):
        with open(cpu_file) as f:
            summary["cpu_s"] = sum(map(float, f.read().split()[-2:]))
        os.remove(cpu_file)
    return summary


def startup_cpu(dev: str, roots: list[str], runs: int = 5) -> list[tuple[float, float]]:
    """(CPU seconds (user + system), wall seconds), medians of ``runs`` (the trees alternating), of an empty
    piped append of each tree in ``roots``: its start-up, imports and the WAL's open and close (issue 31;
    the close included an AIO context's io_destroy, ~30 ms of wall for the kernel's grace period)."""
    seen: list[list[float]] = [[] for _ in roots]
    walls: list[list[float]] = [[] for _ in roots]
    cpu_file = ACKS + ".cpu"
    for _ in range(runs):
        for i, root in enumerate(roots):
            init(dev, root)
            cmd = (f"/usr/bin/time -f '%U %S' -o {_quote(cpu_file)} "
                   + " ".join(map(_quote, walctl_cmd("append", dev, "--stream", "1", "--input", "-", "--framing",
                                                     "length-prefixed", "--json")))
                   + " < /dev/null > /dev/null")
            started = time.perf_counter()
            subprocess.run(["bash", "-c", cmd], check=True, capture_output=True, cwd=root, env=WALCTL_ENV)
            walls[i].append(time.perf_counter() - started)
            with open(cpu_file) as f:
                seen[i].append(sum(map(float, f.read().split()[-2:])))
            os.remove(cpu_file)
    return [(sorted(v)[len(v) // 2], sorted(w)[len(w) // 2]) for v, w in zip(seen, walls)]


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def fio(dev: str, block_size: int, duration: float, size: int, fresh: bool = False, depth: int = 4) -> dict:
    cmd = ["fio", "--name=append-bench", f"--filename={dev}", "--rw=write", f"--bs={block_size}", f"--iodepth={depth}",
           "--ioengine=libaio", "--direct=1", "--sync=dsync", "--time_based", f"--runtime={duration}",
           f"--size={size}", "--output-format=json", *(["--refill_buffers"] if fresh else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"fio failed: {proc.stderr.strip()}")
    write = json.loads(proc.stdout[proc.stdout.index("{"):])["jobs"][0]["write"]
    clat = write.get("clat_ns", {}).get("percentile", {})
    return {"mib_per_s": write["bw_bytes"] / MiB, "p99_us": clat.get("99.000000", 0) / 1000}


def pipe_ceiling(inp: str, pipe_size: int) -> float:
    """MiB/s of `cat FILE | bare reader` (F_SETPIPE_SZ ``pipe_size`` first when non-zero)."""
    cmd = f"cat {_quote(inp)} | {_quote(sys.executable)} -c {_quote(PIPE_READER)} {pipe_size}"
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]) / MiB / float(out[1])


def bare_ceiling(dev: str, inp: str, block_size: int, depth: int) -> dict:
    """`cat FILE | bench/aio_ceiling.py`: MiB/s and CPU s of the pipe written by bare AIO at walctl's
    write size and depth (see the module doc)."""
    script = os.path.join(REPO_ROOT, "bench", "aio_ceiling.py")
    cmd = (f"cat {_quote(inp)} | {_quote(sys.executable)} {_quote(script)} {_quote(dev)} --bs {block_size} "
           f"--iodepth {depth}")
    out = subprocess.run(["bash", "-c", "set -o pipefail; " + cmd], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def stage_line(summary: dict) -> str:
    """µs per MiB of payload of each stage (feed: the append loop's; stages_us: the writer's per block)."""
    mib = max(summary["payload_bytes"] / MiB, 1e-9)
    feed = summary.get("feed_us") or {}
    blocks = summary.get("stages_us") or {}
    n = blocks.get("blocks", 0)
    parts = []
    for name in ("read", "frame", "pack", "pack_cpu", "pack_c", "slot_wait", "ack"):
        if name in feed:
            parts.append(f"{name} {feed[name] / mib:.0f}")
    for name in ("queued", "write", "flush"):
        if name in blocks:
            parts.append(f"{name} {blocks[name]['mean'] * n / mib:.0f}")
    for name in ("submit", "complete"):
        if name in feed:
            parts.append(f"{name} {feed[name] / mib:.0f}")
    return "µs/MiB: " + ", ".join(parts) + " (queued/write/flush: summed over blocks, overlapping)"


def profile_top(path: str, n: int = 12) -> list[str]:
    """The functions most often on top of py-spy's stacks (self time), with their share of samples."""
    if not os.path.exists(path):
        return ["(py-spy not installed)"]
    own: dict[str, int] = {}
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            top = stack.split(";")[-1]
            own[top] = own.get(top, 0) + int(count)
            total += int(count)
    ranked = sorted(own.items(), key=lambda kv: -kv[1])[:n]
    return [f"{100 * c / max(total, 1):5.1f}%  {name}" for name, c in ranked]


def one_size(dev: str, workdir: str, record: int, opts, size: int) -> dict:
    inp = os.path.join(workdir, f"input-{record}.bin")
    count = make_input(inp, record, opts.data)
    rows = []
    for r in range(opts.rounds):
        prof = os.path.join(opts.profile, f"append-{record}-{r}.txt") if opts.profile else None
        s = run_append(dev, inp, True, opts.ack, prof)
        avg = s["bytes_written"] // max(1, s["blocks_written"])
        bs = max(4 * KiB, avg // (4 * KiB) * (4 * KiB))
        f = fio(dev, bs, opts.duration, size)
        pipe_default, pipe_big = pipe_ceiling(inp, 0), pipe_ceiling(inp, MiB)
        row = {"summary": s, "fio": f, "fio_bs": bs, "pipe": pipe_default, "pipe_1m": pipe_big,
               "profile": profile_top(prof) if prof else None, "bare": bare_ceiling(dev, inp, bs, opts.depth),
               "fio_fresh": fio(dev, bs, opts.duration, size, fresh=True),
               # fio at walctl's own depth too (the reference is depth 4 whatever walctl's is)
               "fio_depth": fio(dev, bs, opts.duration, size, depth=opts.depth) if opts.depth != 4 else f}
        if opts.compare:  # the other tree, same input, right after the same fio run
            row["compare"] = run_append(dev, inp, True, "records", None, root=opts.compare)
        if opts.input_file:
            row["file"] = run_append(dev, inp, False, opts.ack, None)
            if opts.compare:  # the other tree's --input FILE, right after this tree's (A/B alternating)
                row["compare_file"] = run_append(dev, inp, False, opts.ack, None, root=opts.compare)
        rows.append(row)
    os.remove(inp)
    return {"record": record, "count": count, "rows": rows}


def report(results: list[dict], opts) -> None:
    print(f"\nloop device (--direct-io=on), {opts.data // MiB} MiB of records per run, --ack {opts.ack}; "
          f"fio --rw=write --iodepth=4 --direct=1 --sync=dsync --ioengine=libaio at walctl's write size")
    head = (f"{'records':>8} {'walctl MiB/s':>12} {'records/s':>10} {'avg write':>9} {'fio MiB/s':>9} {'ratio':>6} "
            f"{'pipe':>6} {'pipe 1M':>7} {'p99 ms':>7} {'file':>6} {'CPU s/GiB':>9} {'own':>5} {'bare':>5} "
            f"{'w/bare':>6} {'fresh':>5} {'@depth':>6}")
    print(head)
    print("-" * len(head))
    for res in results:
        for row in res["rows"]:
            s, f = row["summary"], row["fio"]
            mibs = s["payload_bytes"] / MiB / s["wall_s"]
            p99 = (s.get("stages_us") or {}).get("total", {}).get("p99", 0) / 1000
            file_ratio = _file_ratio(row.get("file"), f)
            print(f"{_size(res['record']):>8} {mibs:>12.1f} {s['records'] / s['wall_s']:>10.0f} "
                  f"{_size(row['fio_bs']):>9} {f['mib_per_s']:>9.1f} {mibs / f['mib_per_s']:>6.2f} "
                  f"{row['pipe'] / f['mib_per_s']:>6.2f} {row['pipe_1m'] / f['mib_per_s']:>7.2f} {p99:>7.2f} "
                  f"{file_ratio:>6} {_cpu(s):>9} {_own(s, f):>5} {_bare(row, f)} {_at_depth(s, row):>6}")
            if "compare" in row:
                c = row["compare"]
                cm = c["payload_bytes"] / MiB / c["wall_s"]
                cp99 = (c.get("stages_us") or {}).get("total", {}).get("p99", 0) / 1000
                print(f"{'(other)':>8} {cm:>12.1f} {c['records'] / c['wall_s']:>10.0f} "
                      f"{_size(c['bytes_written'] // max(1, c['blocks_written'])):>9} {'':>9} "
                      f"{cm / f['mib_per_s']:>6.2f} {'':>6} {'':>7} {cp99:>7.2f} "
                      f"{_file_ratio(row.get('compare_file'), f):>6} {_cpu(c):>9} "
                      f"{_own(c, f):>5} {'':>5} {_vs_bare(c, row):>6}")
    print("ratio, pipe, pipe 1M, file: MiB/s / fio MiB/s (pipe: a bare reader of the same pipe, default size "
          "and F_SETPIPE_SZ 1 MiB; file: --input FILE). p99: a block's first record to durable. CPU s/GiB: the "
          "walctl process's user + system seconds per GiB of payload (the machine's load moves it least). own: "
          "the ratio over append's own seconds (its summary: from opening the WAL to the close), start-up left out. "
          "bare: `cat | bench/aio_ceiling.py` (the pipe written by bare AIO at walctl's write size and depth, no walctl) / "
          "fio; "
          "w/bare: walctl's MiB/s / bare's (wall-clock); fresh: fio --refill_buffers / fio (data that never repeats); "
          f"@depth: walctl's MiB/s / fio's at walctl's own --iodepth ({opts.depth}) and write size.")
    for res in results:
        for row in res["rows"]:
            if "file" in row:  # --input FILE: its CPU and stages beside the piped run's
                other = f", other tree {_cpu(row['compare_file'])}" if "compare_file" in row else ""
                print(f"  {_size(res['record'])} --input FILE: CPU s/GiB {_cpu(row['file'])}{other}; "
                      f"{stage_line(row['file'])}")
                if "compare_file" in row:  # the other tree's stages, for a before -> after per stage
                    print(f"    (other) {stage_line(row['compare_file'])}")
    for res in results:
        for row in res["rows"]:
            print(f"  {_size(res['record'])}: {stage_line(row['summary'])}")
            if "compare" in row:
                print(f"    (other) {stage_line(row['compare'])}")
            if row["profile"]:
                print("    py-spy self time:\n      " + "\n      ".join(row["profile"]))


def _file_ratio(summary: dict | None, fio_row: dict) -> str:
    """--input FILE's MiB/s (wall-clock) / fio's ('' without that run)."""
    if not summary:
        return ""
    return f"{summary['payload_bytes'] / MiB / summary['wall_s'] / fio_row['mib_per_s']:.2f}"


def _bare(row: dict, fio_row: dict) -> str:
    bare, fresh = row.get("bare"), row.get("fio_fresh")
    if not bare:
        return ""
    return (f"{bare['mib_per_s'] / fio_row['mib_per_s']:>5.2f} {_vs_bare(row['summary'], row):>6} "
            f"{fresh['mib_per_s'] / fio_row['mib_per_s'] if fresh else 0:>5.2f}")


def _at_depth(summary: dict, row: dict) -> str:
    """walctl's MiB/s over fio's at walctl's own depth ('' in an older --json file without that run)."""
    f = row.get("fio_depth")
    return f"{summary['payload_bytes'] / MiB / summary['wall_s'] / f['mib_per_s']:.2f}" if f else ""


def _vs_bare(summary: dict, row: dict) -> str:
    bare = row.get("bare")
    return f"{summary['payload_bytes'] / MiB / summary['wall_s'] / bare['mib_per_s']:.2f}" if bare else ""


def _own(summary: dict, fio_row: dict) -> str:
    seconds = summary.get("seconds") or 0
    return f"{summary['payload_bytes'] / MiB / seconds / fio_row['mib_per_s']:.2f}" if seconds > 0 else ""


def _cpu(summary: dict) -> str:
    cpu = summary.get("cpu_s")
    return "" if cpu is None else f"{cpu / max(summary['payload_bytes'] / (1 << 30), 1e-9):.2f}"


def _size(n: int) -> str:
    return f"{n // KiB}KiB" if n >= KiB and n % KiB == 0 else f"{n}B"


@contextlib.contextmanager
def bench_device(size: int, parent: str, prefix: str):
    """A loop device (--direct-io=on) over a zeroed ``size``-byte file in a new directory under
    ``parent``, with walctl's bytecode cached there (WALCTL_ENV); yields (device, directory).
    SIGTERM exits 143; the device is detached and the directory and the acks file removed on the way out."""
    global WALCTL_ENV
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmpdir = tempfile.mkdtemp(prefix=prefix, dir=parent)
    loop = None
    try:
        backing = os.path.join(tmpdir, "backing.img")
        subprocess.run(["dd", "if=/dev/zero", f"of={backing}", "bs=8M", f"count={size // (8 * MiB)}",
                        "conv=fsync"], check=True, capture_output=True)
        loop = subprocess.run(["losetup", "--direct-io=on", "-f", "--show", backing], capture_output=True,
                              text=True, check=True).stdout.strip()
        WALCTL_ENV = walctl_env(os.path.join(tmpdir, "pycache"))
        yield loop, tmpdir
    finally:
        if loop is not None:
            subprocess.run(["losetup", "-d", loop], check=False)
        shutil.rmtree(tmpdir, ignore_errors=True)
        if os.path.exists(ACKS):
            os.remove(ACKS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default="64KiB,4KiB,1KiB,100B")
    parser.add_argument("--data", default="1GiB", help="payload bytes per run (the issue's targets: logs of 1 GiB)")
    parser.add_argument("--size", default="2GiB", help="the loop device's size (more than --data's log)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--duration", type=float, default=5.0, help="fio seconds")
    parser.add_argument("--dir", default="/var/tmp")
    parser.add_argument("--ack", default="records", help="append's --ack mode (records, ranges)")
    parser.add_argument("--profile", help="a directory for py-spy profiles of the walctl runs")
    parser.add_argument("--input-file", action="store_true", help="also time --input FILE (no pipe; with "
                                                                  "--compare, the other tree's too, right after)")
    parser.add_argument("--compare", help="another walctl tree (a checkout with its C extension built): its piped "
                                          "append runs right after this tree's, against the same fio run (--ack "
                                          "records), printed as '(other)' rows")
    parser.add_argument("--startup-runs", type=int, default=5, help="empty appends per tree for the start-up line")
    parser.add_argument("--json", help="also write the raw results to this file")
    parser.add_argument("--report", metavar="JSON", help="print the table of an earlier run's --json file, run nothing")
    opts = parser.parse_args()
    opts.data = parse_size(opts.data)
    opts.depth = walctl_depth()  # bare runs at it, and fio at it as well as at the depth 4
    if opts.report:
        with open(opts.report) as f:
            report(json.load(f), opts)
        return 0
    size = parse_size(opts.size)
    if shutil.which("fio") is None:
        raise SystemExit("fio is not installed (apt-get install -y fio)")
    if opts.profile:
        os.makedirs(opts.profile, exist_ok=True)
    with bench_device(size, opts.dir, "walctl-append-bench-") as (loop, tmpdir):
        for root in (REPO_ROOT, opts.compare) if opts.compare else (REPO_ROOT,):
            warm_up(loop, root)
        roots = [REPO_ROOT, opts.compare] if opts.compare else [REPO_ROOT]
        startup = startup_cpu(loop, roots, opts.startup_runs) if os.path.exists("/usr/bin/time") else []
        results = []
        for record in (parse_size(s) for s in opts.records.split(",")):
            print(f"{_size(record)} ...", file=sys.stderr, flush=True)
            results.append(one_size(loop, tmpdir, record, opts, size))
        report(results, opts)
        if startup:
            print(f"start-up: an empty piped append, CPU s (user + system) and wall s, medians of {opts.startup_runs}: "
                  + ", ".join(f"{name} {cpu:.3f} CPU {wall:.3f} wall"
                              for name, (cpu, wall) in zip(("this tree", "other"), startup)))
        if opts.json:
            with open(opts.json, "w") as f:
                json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
