"""A read-only command loads no writer (issue 19: recover's start-up is mostly imports).

``walctl recover`` opens the WAL through open_reader (walctl.wal.readsession): the writer, the
crash repair, the write queues (AIO, threads) and what they bring (logging,
concurrent.futures) are imported by the functions that write, not by the module. Checked in
a fresh interpreter through sys.modules: no timing.
"""

from __future__ import annotations

import json
import subprocess
import sys

from walhelpers import append_records, new_wal

WRITE_SIDE = ("walctl.wal.writer", "walctl.wal.crash_repair", "walctl.wal.pacing", "walctl.device.aio",
              "walctl.device.writequeue", "walctl.device.blockio", "concurrent.futures")


def _modules_after_recover(path: str) -> tuple[set[str], dict]:
    probe = ("import io, json, sys\n"
             f"sys.argv = ['walctl', 'recover', {path!r}, '--stats', '--json']\n"
             "out, sys.stdout = sys.stdout, io.StringIO()\n"
             "from walctl.cli import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "lines, sys.stdout = sys.stdout.getvalue().splitlines(), out\n"
             "print('SUMMARY ' + lines[-1])\n"
             "print('MODULES ' + json.dumps(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    found = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in proc.stdout.splitlines()
             if line.startswith(("MODULES ", "SUMMARY "))}
    assert "MODULES" in found, proc.stderr
    return set(json.loads(found["MODULES"])), json.loads(found["SUMMARY"])


def test_recover_imports_nothing_of_the_write_side(tmp_path):
    path = new_wal(tmp_path / "w", 4 << 20)
    append_records(path, 30, size=2000)
    modules, summary = _modules_after_recover(path)
    assert summary["records"] == 30 and summary["corrupt_findings"] == 0  # the command really ran
    loaded = sorted(m for m in modules if m.startswith(WRITE_SIDE))
    assert loaded == [], loaded
    assert "walctl.wal.lifecycle" in modules and "walctl.wal.native_scan" in modules


def test_the_write_side_still_loads_where_it_writes(tmp_path):
    """open_writer and trim import them when called (the lazy imports resolve)."""
    from walctl.wal.lifecycle import open_writer
    from walctl.wal.trim import trim_wal

    path = new_wal(tmp_path / "w", 4 << 20)
    acks = append_records(path, 5, size=100, clean=False)
    opened = open_writer(path)  # a crashed log: scanned, repaired
    assert opened.repair is not None and opened.writer.acked_end > 0
    opened.writer.close()
    assert trim_wal(path, acks[2][0]).trim_offset == acks[2][0]
    assert all(m in sys.modules for m in ("walctl.wal.writer", "walctl.wal.crash_repair"))
