"""gc --dry-run lists what the real run deletes (issue 30: it counted 2 old manifests where the
real run, which first commits a manifest, deleted 3)."""

from __future__ import annotations

import time

from walctl.store import manifest as mf
from walctl.store.gc import KEEP_MANIFESTS, gc

LATER = time.time() + 2 * mf.PREPARE_TTL_S


def test_a_dry_run_lists_the_manifests_the_real_run_deletes(local_store):
    for _ in range(KEEP_MANIFESTS + 2):
        mf.commit(local_store, lambda m: m.prepare(1, "default") and None, command="test: prepare")
    planned = gc(local_store, grace_s=0, dry_run=True, now=LATER)
    assert planned.forgotten_prepared and planned.commit_number is None
    assert mf.manifest_numbers(local_store) == list(range(1, KEEP_MANIFESTS + 3))  # nothing deleted
    done = gc(local_store, grace_s=0, now=LATER)
    assert done.commit_number == KEEP_MANIFESTS + 3
    assert planned.deleted_manifests == done.deleted_manifests == [mf.manifest_key(n) for n in (1, 2, 3)]
    assert planned.forgotten_prepared == done.forgotten_prepared
    # nothing to forget: no commit, and the dry run's list is the real run's again
    assert gc(local_store, grace_s=0, dry_run=True, now=LATER).deleted_manifests == [] == \
        gc(local_store, grace_s=0, now=LATER).deleted_manifests
