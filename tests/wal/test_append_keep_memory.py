"""walctl.native.keep_freed_memory (issue 31): `walctl append` has glibc's malloc keep freed memory for
its next allocations. A 100-byte-record append allocates some 220 KB of acknowledgement text a block,
freed once the block is acknowledged; glibc gave that memory back to the system each time, and every
block's text came in fresh pages (page faults and the kernel zeroing them: a sixth of its CPU). The
appends run as child processes: the settings are the process's own."""

from __future__ import annotations

import platform
import resource
import subprocess
import sys

import pytest

from tests.cli.conftest import REPO_ROOT, _env

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")

RECORD = (100).to_bytes(4, "big") + b"x" * 100  # length-prefixed, 100 bytes of payload


def append_faults(tmp_path, env: dict) -> int:
    """Page faults of a `walctl append` of 8 MiB of 100-byte records (some 40 blocks)."""
    wal = tmp_path / "w.img"
    with open(wal, "wb") as f:
        f.truncate(32 << 20)
    run_env = _env(env)
    subprocess.run([sys.executable, "-m", "walctl", "init", str(wal), "--force", "--discard-unuploaded"],
                   check=True, capture_output=True, env=run_env, cwd=str(REPO_ROOT), timeout=60)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    proc = subprocess.run([sys.executable, "-m", "walctl", "append", str(wal), "--stream", "1", "--input", "-",
                           "--framing", "length-prefixed", "--json"], input=RECORD * ((8 << 20) // len(RECORD)),
                          capture_output=True, env=run_env, cwd=str(REPO_ROOT), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(b"\n") == (8 << 20) // len(RECORD) + 1  # a line a record, and the summary
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - before


@glibc
def test_an_append_s_acknowledgement_texts_reuse_freed_memory(tmp_path):
    kept = append_faults(tmp_path, {})
    # malloc tuned by the environment (here to its fixed defaults) is left as it is: every block's text
    # (some 280 KB of lines, 70 pages) comes in fresh pages
    fresh = append_faults(tmp_path, {"MALLOC_TRIM_THRESHOLD_": "131072"})
    assert fresh - kept > 1500, (kept, fresh)


def test_the_settings_are_made_once_a_process(monkeypatch):
    import ctypes

    from walctl import native

    calls = []

    class Libc:
        def mallopt(self, param, value):
            calls.append((param, value))
            return 1

    monkeypatch.setattr(native, "_kept", [])
    for name in native._MALLOC_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: Libc())
    assert native.keep_freed_memory() is True
    assert native.keep_freed_memory() is True
    assert calls == [(-3, 8 << 20), (-1, 32 << 20)]



def recover_faults(wal, payload: str, out_path) -> int:
    """Page faults of a `walctl recover --json --payload PAYLOAD` of ``wal`` (its output to ``out_path``)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    with open(out_path, "wb") as out:
        proc = subprocess.run([sys.executable, "-m", "walctl", "recover", str(wal), "--json", "--payload", payload],
                              stdout=out, stderr=subprocess.PIPE, env=_env({}), cwd=str(REPO_ROOT), timeout=120)
    assert proc.returncode == 0, proc.stderr
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - before


@glibc
def test_recover_s_payload_lines_reuse_freed_memory(tmp_path):
    """recover --json --payload hex renders each read-ahead run (2 MiB of payload) into some 4.2 MiB of
    lines: with malloc's defaults each came in fresh pages (half of the rendering's time, issue 31).
    Reused, the pages touched do not grow with the log: 96 MiB of hex text here, 24,576 pages if it
    all came fresh (8,070 more than --payload none's at 16 MiB of log, without the fix)."""
    wal, inp, out = tmp_path / "w.img", tmp_path / "in.bin", tmp_path / "out.ndjson"
    with open(wal, "wb") as f:
        f.truncate(100 << 20)
    records = 768  # 48 MiB of 64 KiB records
    with open(inp, "wb") as f:
        for i in range(records):
            f.write((65536).to_bytes(4, "big") + bytes([i % 256]) * 65536)
    run_env = _env({})
    for args in (["init", str(wal), "--force", "--discard-unuploaded"],
                 ["append", str(wal), "-s", "1", "--input", str(inp), "--framing", "length-prefixed", "--ack", "ranges"]):
        subprocess.run([sys.executable, "-m", "walctl", *args], check=True, capture_output=True, env=run_env,
                       cwd=str(REPO_ROOT), timeout=60)
    inp.unlink()
    try:
        none = recover_faults(wal, "none", out)
        hexed = recover_faults(wal, "hex", out)
        with open(out, "rb") as f:
            assert sum(chunk.count(b'"payload":"') for chunk in iter(lambda: f.read(1 << 20), b"")) == records
    finally:
        out.unlink(missing_ok=True)
        wal.unlink()
    assert hexed - none < 8000, (none, hexed)
