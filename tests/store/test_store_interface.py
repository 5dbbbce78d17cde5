"""The Store contract, run on both backends (a local directory and S3 over HTTP via moto)."""

from __future__ import annotations

import threading

import pytest

from walctl.errors import NotFoundError, UsageError
from walctl.store import ObjectInfo, PreconditionFailed, Store

DATA = bytes(range(256)) * 40  # 10240 bytes, every offset distinguishable mod 256


def test_store_satisfies_protocol(store):
    assert isinstance(store, Store)
    assert store.url


def test_size_and_read_all(store):
    store.put("objects/a", DATA)
    assert store.size("objects/a") == len(DATA)
    assert store.read_all("objects/a") == DATA


def test_empty_object(store):
    store.put("empty", b"")
    assert store.size("empty") == 0
    assert store.read_all("empty") == b""
    assert store.read_range("empty", 0, 10) == b""
    assert store.read_tail("empty", 8) == (b"", 0)
    assert store.list() == [ObjectInfo("empty", 0)]


@pytest.mark.parametrize("start, end", [
    (0, 1), (0, len(DATA)), (1, 2), (100, 4196), (len(DATA) - 1, len(DATA)), (4095, 4097), (7, 7),
])
def test_read_range_exact_bytes(store, start, end):
    store.put("r", DATA)
    assert store.read_range("r", start, end) == DATA[start:end]


@pytest.mark.parametrize("start, end", [(len(DATA) - 5, len(DATA) + 100), (len(DATA), len(DATA) + 1),
                                        (len(DATA) + 50, len(DATA) + 60)])
def test_read_range_past_end_is_short_like_pread(store, start, end):
    store.put("r", DATA)
    assert store.read_range("r", start, end) == DATA[start:end]


@pytest.mark.parametrize("start, end", [(-1, 5), (5, 4)])
def test_read_range_rejects_bad_ranges(store, start, end):
    store.put("r", DATA)
    with pytest.raises(UsageError):
        store.read_range("r", start, end)


@pytest.mark.parametrize("length", [1, 33, len(DATA) - 1, len(DATA), len(DATA) + 1000, 0])
def test_read_tail_returns_bytes_and_total_in_one_request(store, length):
    store.put("t", DATA)
    gets_before = store.stats.get
    heads_before = store.stats.head
    data, total = store.read_tail("t", length)
    assert total == len(DATA)
    assert data == (DATA[-length:] if length else b"")
    requests = (store.stats.get - gets_before) + (store.stats.head - heads_before)
    assert requests == 1


@pytest.mark.parametrize("call", [
    lambda s: s.size("missing/key"),
    lambda s: s.read_all("missing/key"),
    lambda s: s.read_range("missing/key", 0, 10),
    lambda s: s.read_range("missing/key", 3, 3),
    lambda s: s.read_tail("missing/key", 10),
    lambda s: s.read_tail("missing/key", 0),
], ids=["size", "read_all", "read_range", "read_range_empty", "read_tail", "read_tail_zero"])
def test_missing_object_is_not_found(store, call):
    with pytest.raises(NotFoundError) as info:
        call(store)
    assert info.value.exit_code == 4
    assert "missing/key" in info.value.line()


def test_put_overwrites(store):
    store.put("k", b"one")
    store.put("k", b"two!")
    assert store.read_all("k") == b"two!"
    assert store.list() == [ObjectInfo("k", 4)]


def test_put_if_absent_second_put_refused(store):
    store.put("manifest/00000000000000000001.json", b"first", if_absent=True)
    with pytest.raises(PreconditionFailed) as info:
        store.put("manifest/00000000000000000001.json", b"second", if_absent=True)
    assert info.value.exit_code == 5
    assert "manifest/00000000000000000001.json" in info.value.line()
    assert store.read_all("manifest/00000000000000000001.json") == b"first"


def test_put_if_absent_refuses_over_plain_put(store):
    store.put("k", b"plain")
    with pytest.raises(PreconditionFailed):
        store.put("k", b"create-only", if_absent=True)
    assert store.read_all("k") == b"plain"


def test_racing_if_absent_exactly_one_wins(store):
    rounds = 15
    for n in range(rounds):
        key = f"manifest/{n:020d}.json"
        barrier = threading.Barrier(2)
        winners: list[bytes] = []
        losers: list[BaseException] = []

        def commit(payload: bytes) -> None:
            barrier.wait()
            try:
                store.put(key, payload, if_absent=True)
                winners.append(payload)
            except PreconditionFailed as exc:
                losers.append(exc)

        threads = [threading.Thread(target=commit, args=(f"writer-{i}".encode(),)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert len(winners) == 1 and len(losers) == 1, f"round {n}: {winners=} {losers=}"
        assert store.read_all(key) == winners[0]


def test_list_sorted_with_sizes_and_prefixes(store):
    keys = ["b/2", "a", "b/10", "b/1", "manifest/00000000000000000002.json",
            "manifest/00000000000000000010.json", "c/d/e/f", "ab"]
    for i, key in enumerate(keys):
        store.put(key, b"x" * i)
    assert store.list() == sorted((ObjectInfo(k, i) for i, k in enumerate(keys)), key=lambda o: o.key)
    assert [o.key for o in store.list("b/")] == ["b/1", "b/10", "b/2"]
    assert [o.key for o in store.list("b/1")] == ["b/1", "b/10"]
    assert [o.key for o in store.list("a")] == ["a", "ab"]
    assert [o.key for o in store.list("manifest/0000000000000000001")] == [
        "manifest/00000000000000000010.json"]
    assert [o.key for o in store.list("c/d")] == ["c/d/e/f"]
    assert store.list("nothing/") == []
    assert store.list("zzz") == []


def test_delete_is_idempotent(store):
    store.put("d/k", b"v")
    store.delete("d/k")
    with pytest.raises(NotFoundError):
        store.size("d/k")
    store.delete("d/k")
    store.delete("never/existed")
    assert store.list() == []


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "..", "a//b", "a/./b", "a/", ".tmp-x", "d/.tmp-1",
                                 "nul\x00byte"])
def test_bad_keys_are_usage_errors(store, key):
    with pytest.raises(UsageError) as info:
        store.put(key, b"x")
    assert info.value.exit_code == 2
    with pytest.raises(UsageError):
        store.read_all(key)


@pytest.mark.parametrize("prefix", ["/a", "../", "a/../", "a//"])
def test_bad_list_prefixes_are_usage_errors(store, prefix):
    with pytest.raises(UsageError):
        store.list(prefix)


def test_put_large_small_object_is_one_put(store):
    store.put_large("big/small", DATA)
    assert store.read_all("big/small") == DATA
    assert store.stats.multipart_parts == 0


def test_put_large_accepts_an_iterable(store):
    chunks = [DATA[i:i + 1000] for i in range(0, len(DATA), 1000)]
    store.put_large("big/chunks", iter(chunks))
    assert store.read_all("big/chunks") == DATA


def test_put_large_rejects_small_parts(store):
    with pytest.raises(UsageError):
        store.put_large("big/x", DATA, part_size=1 << 20)


def test_stats_count_requests_and_bytes(store):
    store.put("s/a", DATA)
    store.read_range("s/a", 0, 100)
    store.read_all("s/a")
    store.list("s/")
    store.size("s/a")
    store.delete("s/a")
    stats = store.stats.snapshot()
    assert stats["put"] == 1 and stats["get"] == 2 and stats["ranged_gets"] == 1
    assert stats["list"] == 1 and stats["head"] == 1 and stats["delete"] == 1
    assert stats["bytes_written"] == len(DATA)
    assert stats["bytes_read"] == 100 + len(DATA)
    assert store.stats.requests == 6
