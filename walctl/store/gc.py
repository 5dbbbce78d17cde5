"""gc: delete what no manifest can need any more (docs/FORMATS.md 5).

Order matters: first commit a manifest that forgets expired prepared ids and
replaced objects past their grace period, then delete objects that the newest
manifest does not reference and whose id it already allocated (an id at or above
``next_object_id`` may belong to an upload that prepared it after we read).
An unreferenced allocated id can never become live again (a commit needs it
prepared), so deleting its object is always safe.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from walctl.failpoints import failpoint
from walctl.store import manifest as mf
from walctl.store.base import Store

DEFAULT_GRACE_S = 3600.0
KEEP_MANIFESTS = 10  # the last few commits stay for forensics


@dataclass
class GcResult:
    deleted_objects: list[str] = field(default_factory=list)
    forgotten_prepared: list[int] = field(default_factory=list)
    forgotten_deleting: list[int] = field(default_factory=list)
    deleted_manifests: list[str] = field(default_factory=list)
    aborted_uploads: list[str] = field(default_factory=list)
    deleted_temp_files: list[str] = field(default_factory=list)
    commit_number: int | None = None
    dry_run: bool = False

    def to_json(self) -> dict:
        return {"deleted_objects": self.deleted_objects, "deleted_object_count": len(self.deleted_objects),
                "forgotten_prepared": self.forgotten_prepared, "forgotten_deleting": self.forgotten_deleting,
                "deleted_manifests": self.deleted_manifests, "aborted_uploads": self.aborted_uploads,
                "deleted_temp_files": self.deleted_temp_files, "commit_number": self.commit_number,
                "dry_run": self.dry_run}


def _object_id_of(key: str) -> int | None:
    parts = key.split("/")
    if len(parts) != 3 or parts[0] == mf.MANIFEST_DIR or not parts[2].isdigit():
        return None
    object_id = int(parts[2])
    return object_id if f"{object_id:08x}"[::-1] == parts[0] else None


def gc(store: Store, *, grace_s: float = DEFAULT_GRACE_S, dry_run: bool = False, now: float | None = None) -> GcResult:
    """Forget expired prepared ids and replaced objects older than ``grace_s``, then delete the
    objects nothing references any more and manifests beyond the kept history.

    ``now`` (seconds since the epoch) is for tests that need time to have passed.
    """
    now = time.time() if now is None else now
    result = GcResult(dry_run=dry_run)
    doc = mf.load_latest(store, required=True)  # no manifest: not a walctl store, delete nothing
    doc = _forget(store, doc, result, grace_s, now)
    failpoint("gc-before-delete")
    referenced = doc.referenced_ids()
    if dry_run:
        referenced -= set(result.forgotten_prepared) | set(result.forgotten_deleting)

    def garbage(key: str) -> bool:
        """An object key of an id the manifest allocated and no longer references."""
        object_id = _object_id_of(key)
        return object_id is not None and object_id not in referenced and object_id < doc.next_object_id

    _delete_objects(store, garbage, result)
    _abort_uploads(store, garbage, result)
    _delete_temp_files(store, now, result)
    _delete_old_manifests(store, result)
    return result


def _forget(store: Store, doc: mf.Manifest, result: GcResult, grace_s: float, now: float) -> mf.Manifest:
    """Commit a manifest without the expired prepared ids and the replaced objects past their grace
    (a dry run only lists them); returns the manifest the deletions go by."""

    def expired(m: mf.Manifest) -> tuple[list[int], list[int]]:
        # Prepared ids expire by the TTL set when they were reserved (an upload or compaction may
        # still be writing them), not by --grace, which is the readers' grace for replaced objects.
        return ([p.id for p in m.prepared if p.expires_at <= now],
                [d.id for d in m.deleting if now - d.marked_at >= grace_s])

    prepared, deleting = expired(doc)
    if not (prepared or deleting):
        return doc
    if result.dry_run:
        result.forgotten_prepared, result.forgotten_deleting = prepared, deleting
        return doc

    def forget(m: mf.Manifest) -> None:
        result.forgotten_prepared, result.forgotten_deleting = expired(m)
        m.forget(result.forgotten_prepared, result.forgotten_deleting)

    committed = mf.commit(store, forget, command="gc")
    result.commit_number = committed.number
    failpoint("gc-after-commit")  # a rerun deletes what this run would have
    return committed.manifest


def _delete_objects(store: Store, garbage, result: GcResult) -> None:
    for info in store.list():
        if garbage(info.key):
            result.deleted_objects.append(info.key)
            if not result.dry_run:
                store.delete(info.key)
                failpoint("gc-after-delete")


def _abort_uploads(store: Store, garbage, result: GcResult) -> None:
    """A writer killed during a multipart upload (S3) leaves parts that no listing shows; abort
    those of garbage ids by the same rule (an allocated id nothing references)."""
    open_uploads = getattr(store, "open_multipart_uploads", None)
    if open_uploads is None:
        return
    for key in open_uploads():
        if garbage(key):
            result.aborted_uploads.append(key)
            if not result.dry_run:
                store.abort_multipart_uploads(key)


def _delete_temp_files(store: Store, now: float, result: GcResult) -> None:
    """The same for a local store: a writer killed mid-put or mid-spool leaves a temp file that no
    listing shows. One untouched for as long as a prepared id lives belongs to no live writer."""
    stale_temp_files = getattr(store, "stale_temp_files", None)
    if stale_temp_files is None:
        return
    for rel in stale_temp_files(mf.PREPARE_TTL_S, now):
        result.deleted_temp_files.append(rel)
        if not result.dry_run:
            store.remove_temp_file(rel)


def _delete_old_manifests(store: Store, result: GcResult) -> None:
    """The manifests beyond the last KEEP_MANIFESTS (a dry run counts the commit it would have made)."""
    numbers = mf.manifest_numbers(store)
    would_commit = result.dry_run and bool(result.forgotten_prepared or result.forgotten_deleting)
    keep = KEEP_MANIFESTS - 1 if would_commit else KEEP_MANIFESTS
    for number in numbers[:-keep]:
        key = mf.manifest_key(number)
        result.deleted_manifests.append(key)
        if not result.dry_run:
            store.delete(key)
