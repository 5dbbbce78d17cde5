"""append's --iodepth reaches the writer: six blocks in flight by default (walctl.defaults:
fio's customary four left the device idle while a batch of completions was handled, issue 31),
the option and WALCTL_IODEPTH otherwise."""

from __future__ import annotations

import pytest

from walctl.wal import lifecycle


@pytest.mark.parametrize("extra, env, depth", [([], None, 6), (["--iodepth", "2"], None, 2),
                                               ([], {"WALCTL_IODEPTH": "9"}, 9)])
def test_the_writer_gets_append_s_depth(cli, new_wal, monkeypatch, extra, env, depth):
    wal = new_wal()
    seen = []
    real = lifecycle.open_writer

    def spy(path, **kw):
        opened = real(path, **kw)
        seen.append(opened.writer.iodepth)
        return opened

    monkeypatch.setattr(lifecycle, "open_writer", spy)
    result = cli("append", wal, "-s", "1", "a", *extra, env=env)
    assert result.exit_code == 0, result.stderr
    assert seen == [depth]


@pytest.mark.parametrize("how, extra, depth", [("file", [], 10), ("redirect", [], 10), ("pipe", [], 6),
                                               ("file", ["--iodepth", "3"], 3)])
def test_a_regular_file_s_input_is_written_ten_blocks_deep_and_the_summary_says_so(new_wal, tmp_path, how,
                                                                                   extra, depth):
    """A regular file's input (--input FILE, or stdin redirected from one) is a bulk load: its producer
    never waits, and a deeper queue keeps more bytes in flight (walctl.defaults.FILE_IODEPTH); a stream
    keeps six; --iodepth wins over both. The summary's iodepth is the depth the writer used."""
    import json
    import subprocess
    import sys

    wal = new_wal("1MiB")
    data = tmp_path / "records.txt"
    data.write_bytes(b"".join(b"record %d\n" % i for i in range(50)))
    args = [sys.executable, "-m", "walctl", "append", wal, "-s", "1", "--json", *extra]
    if how == "file":
        proc = subprocess.run([*args, "--input", str(data)], capture_output=True, timeout=60)
    elif how == "redirect":
        with open(data, "rb") as f:
            proc = subprocess.run([*args, "--input", "-"], stdin=f, capture_output=True, timeout=60)
    else:
        proc = subprocess.run([*args, "--input", "-"], input=data.read_bytes(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    summary = json.loads(lines[-1])
    assert summary["type"] == "summary" and summary["records"] == 50 and len(lines) == 51
    assert summary["iodepth"] == depth
