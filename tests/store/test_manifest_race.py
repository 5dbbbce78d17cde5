"""Manifest commit losing a race (issue 32), on both stores: a local folder and S3 (moto over HTTP).

The fence is the store's create-if-absent put of the next manifest number: the commit that loses
must not overwrite the winner's manifest, and must re-run its change against the winner's."""

from __future__ import annotations

import pytest

from walctl.errors import RefusedError
from walctl.store import manifest as mf
from walctl.store.base import PreconditionFailed


def test_a_commit_that_loses_the_race_re_reads_and_keeps_the_winners_manifest(store):
    mf.commit(store, lambda m: setattr(m, "next_object_id", 10), command="test base")
    won: list[mf.Committed] = []
    bases: list[int] = []

    def winner(m):
        m.next_object_id += 5

    def loser(m):
        bases.append(m.number)
        if not won:  # another writer commits manifest 2 after we read manifest 1, before we write
            won.append(mf.commit(store, winner, command="test winner"))
        m.next_object_id += 100

    committed = mf.commit(store, loser, command="test loser")
    assert bases == [1, 2] and won[0].number == 2
    assert (committed.number, committed.attempts) == (3, 2)
    second = mf.load(store, 2)  # the winner's, not overwritten by the loser's first try
    assert second.commit_id == won[0].manifest.commit_id and second.writer["command"] == "test winner"
    assert second.next_object_id == 15
    latest = mf.load_latest(store)
    assert (latest.number, latest.parent, latest.next_object_id) == (3, 2, 115)
    assert latest.writer["command"] == "test loser"
    assert mf.manifest_numbers(store) == [1, 2, 3]


def test_the_store_refuses_a_second_manifest_of_the_same_number(store):
    mf.commit(store, lambda m: None, command="test one")
    with pytest.raises(PreconditionFailed):
        store.put(mf.manifest_key(1), b"{}", if_absent=True)
    assert mf.load(store, 1).writer["command"] == "test one"


def test_a_commit_that_always_loses_gives_up_with_a_refusal(store, monkeypatch):
    monkeypatch.setattr(mf, "MAX_COMMIT_ATTEMPTS", 3)
    mf.commit(store, lambda m: None, command="test base")
    tries: list[int] = []

    def always_beaten(m):
        tries.append(m.number)
        mf.commit(store, lambda other: None, command="test winner")

    with pytest.raises(RefusedError, match="could not commit after 3 attempts") as info:
        mf.commit(store, always_beaten, command="test loser")
    assert info.value.where == store.url and info.value.hint == "retry later"
    assert tries == [1, 2, 3]
    assert all(mf.load(store, n).writer["command"] == "test winner" for n in (2, 3, 4))
