"""The Store protocol is the boundary (issue 29 item 2, "Done when"): outside walctl/store/ no code
asks what a store is (``hasattr``/``isinstance`` on it: it reads ``store.capabilities``) or calls
a private store method (``store._call``, ``self.store._path``...: multipart and the rest are store
methods). A grep over walctl/, as the issue states it; comments and strings do not count."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "walctl"

# A name or attribute ending in "store" (store, self.store, self._store, task_store...), then:
PROBE = re.compile(r"\b(?:hasattr|isinstance)\(\s*(?:[\w.]*\.)?_?\w*store\b")
PRIVATE_CALL = re.compile(r"\b_?\w*store\._[A-Za-z]\w*")


def _code_lines(text: str) -> list[tuple[int, str]]:
    """(line number, the line with its comments and string literals blanked)."""
    lines = text.splitlines()
    blank: dict[int, list[tuple[int, int]]] = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.STRING):
            (r0, c0), (r1, c1) = tok.start, tok.end
            for row in range(r0, r1 + 1):
                start = c0 if row == r0 else 0
                end = c1 if row == r1 else len(lines[row - 1])
                blank.setdefault(row, []).append((start, end))
    out = []
    for n, line in enumerate(lines, 1):
        chars = list(line)
        for a, b in blank.get(n, ()):
            chars[a:b] = " " * (b - a)
        out.append((n, "".join(chars)))
    return out


def offences(text: str) -> list[str]:
    found = []
    for n, line in _code_lines(text):
        for pattern in (PROBE, PRIVATE_CALL):
            found.extend(f"{n}: {m.group(0)}" for m in pattern.finditer(line) if not m.group(0).endswith("__"))
    return found


def test_no_store_probe_or_private_store_call_outside_store():
    bad = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR.parent).as_posix()
        if rel.startswith("walctl/store/"):
            continue
        bad.extend(f"{rel}:{hit}" for hit in offences(path.read_text(encoding="utf-8")))
    assert bad == [], ("ask store.capabilities or add a Store method (walctl/store/base.py), "
                       "never probe a store or call its private methods: " + "; ".join(bad))


def test_the_grep_finds_what_it_should():
    assert offences("if hasattr(store, 'root'):\n    pass\n")
    assert offences("ok = isinstance(self.store, LocalStore)\n")
    assert offences("store._call('CreateMultipartUpload', key)\n")
    assert offences("path = self.store._path(key)\n")
    assert offences("task_store._upload_part(key)\n")
    assert not offences("store.capabilities.min_part_bytes\n")
    assert not offences("store.put_part(key, upload_id, 1, chunks, 0)\n")
    assert not offences("# store._call is private\nx = 'store._path'\n")
