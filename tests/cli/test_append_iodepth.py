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
