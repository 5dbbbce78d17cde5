"""Coverage-guided fuzzing with atheris (libFuzzer), when it is installed (`pip install atheris`).

Each target runs in its own process (libFuzzer exits the process when it is done) with
walctl's modules instrumented: the decoders on raw bytes, `recover` on a WAL image patched
by the fuzzer's bytes, and `inspect-object` on the fuzzer's bytes as an object. A crash is
any exception but FormatError from a decoder, or a command exit outside 0, 3, 4, or a
traceback. Runs per target: WALCTL_ATHERIS_RUNS (default 2000); WALCTL_SOAK=1 makes it 100000.
Skipped, saying so, when atheris is not installed: the hypothesis fuzzers cover the same ground.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from walhelpers import append_records, new_wal

atheris = pytest.importorskip("atheris", reason="atheris is not installed (pip install atheris); "
                                                 "the hypothesis fuzzers cover the same ground")

REPO_ROOT = Path(__file__).resolve().parents[2]
SOAK = os.environ.get("WALCTL_SOAK", "") not in ("", "0")
RUNS = int(os.environ.get("WALCTL_ATHERIS_RUNS", "100000" if SOAK else "2000"))

TARGET = textwrap.dedent('''
    import json, os, struct, sys
    import atheris

    WHICH = sys.argv[1]
    with atheris.instrument_imports(include=["walctl"]):
        from walctl.errors import FormatError, NotFoundError
        from walctl.format import object as obj
        from walctl.format import record as rec
        from walctl.format.batch import StreamRecordBatch
        from walctl.format.crc import automq_crc
        from walctl.format.header import WalHeader
        from walctl.wal.headers import decode_slots
        if WHICH != "decoders":  # (the decoders' target runs no command: no CLI to import and build)
            from walctl.cli import app
    if WHICH != "decoders":
        import typer.main, typer.testing

        COMMAND = typer.main.get_command(app)
        typer.testing._get_command = lambda _app: COMMAND
        RUNNER = typer.testing.CliRunner()
    WORK = os.environ["FUZZ_WORK"]
    BASE = open(os.environ["FUZZ_IMAGE"], "rb").read()

    def check_cli(args):
        result = RUNNER.invoke(app, args)
        if result.exit_code not in (0, 3, 4) or "Traceback" in result.stderr:
            raise AssertionError(f"exit {result.exit_code}: {result.stderr}")
        lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        if not lines or lines[-1]["type"] != "summary":
            raise AssertionError("no closing summary line")

    def decoders(data):
        for fn in (lambda: WalHeader.decode(data),
                   lambda: decode_slots((data + bytes(8192))[:8192]),
                   lambda: rec.RecordHeader.decode(data, expected_offset=0),
                   lambda: rec.RecordHeader.decode(data, checksum=automq_crc),
                   lambda: StreamRecordBatch.decode(data, exact=True),
                   lambda: obj.parse_tail(data, len(data)),
                   lambda: obj.DataBlockHeader.decode(data),
                   lambda: obj.IndexEntry.decode(data)):
            try:
                fn()
            except (FormatError, NotFoundError):
                pass
        obj.verify_object(data)

    def recover(data):
        image = bytearray(BASE)
        for i in range(0, len(data) - 2, 3):  # (position / 4, byte) patches, hot at the headers
            pos = (struct.unpack_from(">H", data, i)[0] * 4) % len(image)
            image[pos] = data[i + 2]
        path = os.path.join(WORK, "case.img")
        with open(path, "wb") as f:
            f.write(image)
        check_cli(["recover", path, "--json", "--hexdump"])

    def inspect(data):
        path = os.path.join(WORK, "object.bin")
        with open(path, "wb") as f:
            f.write(data)
        check_cli(["inspect-object", path, "--json", "--deep"])

    atheris.Setup(sys.argv[1:], {"decoders": decoders, "recover": recover, "inspect": inspect}[WHICH])
    atheris.Fuzz()
''')


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    work = tmp_path_factory.mktemp("atheris")
    path = new_wal(work / "base.img", 64 << 10)  # (on disk: init refuses tmpfs)
    append_records(path, 12, size=1500, iodepth=2, clean=False)
    (work / "target.py").write_text(TARGET)
    return work


@pytest.fixture(scope="module")
def cases(work):
    """Where each run's file is written and read back: in memory (/dev/shm) when it takes O_DIRECT
    opens, as a disk's file system does (walctl then reads it the same way), else ``work``. On
    disk, each run's write followed by recover's O_DIRECT read waits for the write to reach the
    disk (as in test_fuzz_cli's _work_dir)."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield work
        return
    where = Path(tempfile.mkdtemp(prefix="walctl-atheris-", dir=shm))
    try:
        probe = where / "probe"
        probe.write_bytes(bytes(4096))
        try:
            os.close(os.open(probe, os.O_RDONLY | getattr(os, "O_DIRECT", 0)))
        except OSError:
            yield work
        else:
            yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("target,runs", [("decoders", RUNS * 10), ("recover", RUNS), ("inspect", RUNS)])
def test_atheris(work, cases, target, runs, capsys):
    env = dict(os.environ, FUZZ_WORK=str(cases), FUZZ_IMAGE=str(work / "base.img"),
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(work / "target.py"), target, f"-runs={runs}", "-seed=1",
                           "-max_len=2048", "-len_control=0", "-rss_limit_mb=4096"],
                          capture_output=True, text=True, timeout=900, env=env, cwd=work)
    tail = "\n".join(proc.stderr.splitlines()[-30:])
    assert proc.returncode == 0, tail
    assert f"Done {runs} runs" in proc.stderr, tail
    with capsys.disabled():
        print(f"\natheris {target}: {runs} runs, no crash")
