"""store.compose, the copy primitive of SO compaction and force split, on both backends."""

from __future__ import annotations

import os

import pytest

from walctl.errors import NotFoundError, WalctlError
from walctl.store.base import CopySource

MiB = 1 << 20


def test_compose_is_the_concatenation(store):
    a, b = os.urandom(6 * MiB + 7), os.urandom(3000)
    store.put_large("src/a", a)
    store.put("src/b", b)
    store.stats.reset()
    store.compose("out/x", [CopySource("src/a", 5, 6 * MiB + 7), b"--", CopySource("src/b", 100, 2100),
                            CopySource("src/a", 0, 5), b"end"])
    assert store.read_all("out/x") == a[5:] + b"--" + b[100:2100] + a[:5] + b"end"
    stats = store.stats.snapshot()
    assert stats["bytes_copied"] >= 6 * MiB  # the big range never came through us
    assert stats["bytes_copied"] + stats["bytes_written"] == len(store.read_all("out/x"))


def test_compose_of_a_missing_source_fails_and_writes_nothing(store):
    store.put("src/a", b"x" * 100)
    with pytest.raises(NotFoundError):
        store.compose("out/y", [CopySource("src/a", 0, 100), CopySource("src/missing", 0, 10), b"t"])
    assert [i.key for i in store.list("out/")] == []


def test_compose_of_a_range_past_the_source_end_fails_and_writes_nothing(store):
    store.put("src/a", b"x" * 100)
    with pytest.raises(WalctlError):
        store.compose("out/z", [CopySource("src/a", 50, 150), b"t"])
    assert [i.key for i in store.list("out/")] == []
    if hasattr(store, "open_multipart_uploads"):
        assert store.open_multipart_uploads() == []
