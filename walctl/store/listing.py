"""What ``walctl ls`` shows of a store: its newest manifest and its last commits (FORMATS.md 5)."""

from __future__ import annotations

from dataclasses import dataclass

from walctl.store import manifest as mf
from walctl.store.base import S3Settings

HISTORY = 5  # commits shown


@dataclass(frozen=True)
class CommitInfo:
    number: int
    commit_id: str | None
    time: float | None
    command: str | None  # the writer's command ("upload", "compact (fence + prepare)", ...)
    host: str | None

    def to_json(self) -> dict:
        return {"number": self.number, "commit_id": self.commit_id, "time": self.time,
                "command": self.command, "host": self.host}


@dataclass
class Listing:
    store: str  # the URL as given
    manifest: mf.Manifest
    commits: list[CommitInfo]
    sizes: dict[str, int] | None = None  # what the store's LIST says of each live object's key (absent: missing)

    def mismatches(self) -> dict[str, str]:
        """Live objects the LIST shows missing or of another size than the manifest's: key -> what."""
        if self.sizes is None:
            return {}
        from walctl.store.inspect import truncation

        out = {}
        for o in self.manifest.objects:
            size = self.sizes.get(o.key)
            if size is None:
                out[o.key] = "missing from the store"
            elif size != o.size:
                out[o.key] = truncation(size, o.size)
        return out

    def to_json(self) -> dict:
        m = self.manifest
        return {
            "store": self.store, "manifest_number": m.number, "next_object_id": m.next_object_id,
            "compactor_epoch": m.compactor_epoch,
            "streams": [{"stream_id": sid, "start_offset": span.start, "end_offset": span.end}
                        for sid, span in sorted(m.streams.items())],
            "objects": [{"id": o.id, "key": o.key, "kind": o.kind, "size_bytes": o.size,
                         "store_size_bytes": self.sizes.get(o.key) if self.sizes is not None else None,
                         "streams": [r.to_json() for r in o.ranges]} for o in m.objects],
            "prepared": [p.to_json() for p in m.prepared], "deleting": [d.to_json() for d in m.deleting],
            "wal_uploads": {node: mark.to_json() for node, mark in m.wal_uploads.items()},
            "last_commits": [c.to_json() for c in self.commits],
        }


def list_store(url: str, *, endpoint_url: str | None = None, history: int = HISTORY,
               s3: S3Settings | None = None) -> Listing:
    """The newest manifest of the store at ``url``, its last ``history`` commits, and the sizes one
    LIST of the store gives its live objects (so a missing or truncated one shows; read-only);
    ``s3``: open_store's S3 settings.

    Raises:
        NotFoundError: no store there, or no manifest (nothing uploaded yet).
    """
    from walctl.store import open_store

    store = open_store(url, endpoint_url=endpoint_url, create=False, s3=s3)
    doc = mf.load_latest(store, required=True)
    commits = []
    for number in mf.manifest_numbers(store)[-history:]:
        m = mf.load(store, number)
        writer = m.writer or {}
        commits.append(CommitInfo(number, m.commit_id, m.time, writer.get("command"), writer.get("host")))
    live = {o.key for o in doc.objects}
    sizes = {i.key: i.size for i in store.list() if i.key in live}
    return Listing(url, doc, commits, sizes)
