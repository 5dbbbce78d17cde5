"""No raw manifest-entry key access outside walctl/store/manifest*.py (issue 29 item 3, "Done when").

The manifest's entries are typed (walctl/store/manifest.py: LiveObject, ObjectRange, PreparedId,
DeletingEntry, UploadMark, StreamGap): code reads ``o.key``, ``r.stream_id``, ``mark.offset``, never
``o["key"]``. The entries still answer dict-style reads (a shim for the transition); this test finds
the code that uses it: a key only manifest entries have (``["ranges"]``, ``.get("order_id")``, ...)
read anywhere, or an entry's key (``["key"]``, ``["start"]``, ...) read on a name the code gives
entries (``o``, ``r``, ``mark``, ...). A line that reads another JSON object that way says so with
the comment ``# not a manifest entry``.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

_ONLY_IN_MANIFESTS = (r"ranges|order_id|data_time|expires_at|prepared_at|marked_at|body_crc|wal_uploads|stream_gaps|"
                      r"next_object_id|compactor_epoch")
_ENTRY_NAMES = r"o|obj|p|d|r|g|e|entry|mark|reservation|out|src|inp|so|sso"
_ENTRY_KEYS = r"id|key|kind|size|start|end|bytes|stream_id|offset|base_offset|from|to|cause"
RAW_ACCESS = re.compile(
    rf"""\[["']({_ONLY_IN_MANIFESTS})["']\]|\.get\(["']({_ONLY_IN_MANIFESTS})["']"""
    rf"""|\b({_ENTRY_NAMES})(\[["']|\.get\(["'])({_ENTRY_KEYS})["']""")
MARKER = "# not a manifest entry"

# Files whose matches are other JSON objects, not manifest entries.
NOT_ENTRIES = {
    "walctl/errors.py": "``out`` is the error's JSON object",
    "walctl/selftest/steps.py": "reads the commands' --json output (ls, inspect-object, recover), not a manifest",
    "walctl/store/multipart.py": "``p`` is a multipart upload's part",
}

# Not converted yet: each is converted by its owner after the merge of the typed manifest (the
# entries' dict-style shim keeps them working meanwhile). The list only shrinks.
PENDING: dict[str, str] = {}


def _raw_accesses() -> dict[str, list[str]]:
    """file -> its lines that read a manifest entry as a dict, outside walctl/store/manifest*.py."""
    found: dict[str, list[str]] = {}
    for path in sorted((REPO_ROOT / "walctl").rglob("*.py")):
        rel = path.relative_to(REPO_ROOT).as_posix()
        if re.fullmatch(r"walctl/store/manifest\w*\.py", rel) or rel in NOT_ENTRIES:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if RAW_ACCESS.search(line) and MARKER not in line:
                found.setdefault(rel, []).append(f"{rel}:{number}: {line.strip()}")
    return found


def _pending(rel: str) -> str | None:
    return next((entry for entry in PENDING if rel == entry or (entry.endswith("/") and rel.startswith(entry))),
                None)


def test_no_raw_manifest_entry_access_outside_the_manifest_module():
    found = _raw_accesses()
    offenders = [line for rel, lines in found.items() if _pending(rel) is None for line in lines]
    assert not offenders, ("read manifest entries by attribute (o.key, r.stream_id, mark.offset), not as dicts:\n"
                           + "\n".join(offenders))


def test_the_pending_list_only_shrinks():
    found = _raw_accesses()
    stale = [entry for entry in PENDING if not any(_pending(rel) == entry for rel in found)]
    assert not stale, f"converted: delete {stale} from PENDING"
    unused = [rel for rel in NOT_ENTRIES if not (REPO_ROOT / rel).exists()]
    assert not unused, f"gone: delete {unused} from NOT_ENTRIES"


def test_the_scan_finds_what_it_is_for():
    samples = ['span = o["ranges"][0]', 'x = p.get("expires_at")', 'k = o["key"]', 'when = mark["offset"]',
               'r.get("start", 0)', 'gaps = doc.stream_gaps or []']
    assert [bool(RAW_ACCESS.search(s)) for s in samples] == [True, True, True, True, True, False]
    assert not RAW_ACCESS.search("k = o.key; s = r.stream_id; n = mark.offset; row['key']")
