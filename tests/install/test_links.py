"""Every relative link in README.md, docs/ and man/ resolves inside a clone of the repository
(issue 18: the README used to point at ../shared/, which a clone from anywhere else lacks).

Checked in a fresh ``git clone`` (committed files only):
- Markdown links ``[text](target)``, reference definitions ``[id]: target`` and HTML
  ``href``/``src``: the file must exist inside the clone; an ``#anchor`` must name a
  heading of the target (GitHub's slugs).
- Paths in code spans (Markdown) and in man page text whose first part is one of the
  repository's top-level folders (``scripts/gen-man``, ``man/*.1``, ``docs/CLI.md``): they
  must exist (a glob must match), from the repository root. Placeholders are written
  ``<like-this>`` and not checked. A code span's ``../path`` must stay inside the clone.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import manpage  # tools/manpage.py (pyproject's pytest pythonpath)

REPO_ROOT = Path(__file__).resolve().parents[2]

LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
HTML = re.compile(r"""(?:href|src)\s*=\s*["']([^"']+)["']""")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def slugs(markdown: str) -> set[str]:
    """GitHub's anchors for a Markdown file's headings (duplicates get -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for title in HEADING.findall(FENCE.sub("", markdown)):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).replace("`", "").lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _top_folders(root: Path) -> set[str]:
    files = subprocess.run(["git", "-C", str(root), "ls-files"], capture_output=True, text=True,
                           check=True, timeout=60).stdout.split()
    return {f.split("/", 1)[0] for f in files if "/" in f}


def _repo_paths(text: str, folders: set[str]) -> list[str]:
    """Words that name a path under one of the repository's top-level folders."""
    found = []
    for word in re.split(r"[\s`'\"(),;]+", text):
        word = word.rstrip(".:")
        if any(mark in word for mark in ("<", "{", "...")):
            continue  # a placeholder: man/walctl-<command>.1
        if "/" in word and word.split("/", 1)[0] in folders and not SCHEME.match(word):
            found.append(word)
    return found


def _exists(root: Path, rel: str) -> bool:
    if any(c in rel for c in "*?["):
        return any(root.glob(rel))
    return (root / rel).exists()


def _inside(root: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return path.exists()


def check_markdown(root: Path, doc: Path, folders: set[str]) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    where = doc.relative_to(root)
    problems = []
    prose = FENCE.sub("", text)
    targets = LINK.findall(prose) + REF_DEF.findall(prose) + HTML.findall(text)
    for target in targets:
        if SCHEME.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        dest = doc if not path_part else doc.parent / path_part
        if not _inside(root, dest):
            problems.append(f"{where}: link {target!r} does not resolve inside the repository")
            continue
        if anchor and dest.suffix == ".md" and anchor not in slugs(dest.read_text(encoding="utf-8")):
            problems.append(f"{where}: link {target!r}: no heading with anchor #{anchor} in {dest.relative_to(root)}")
    for span in CODE_SPAN.findall(prose):
        for rel in _repo_paths(span, folders):
            if not _exists(root, rel):
                problems.append(f"{where}: `{rel}` does not exist in the repository")
        for word in span.split():
            if word.startswith("../") and not _inside(root, doc.parent / word.rstrip(".:,;")):
                problems.append(f"{where}: `{word}` is outside the repository (or missing)")
    return problems


def check_manpage(root: Path, page: Path, folders: set[str]) -> list[str]:
    text = page.read_text(encoding="utf-8").replace("\\-", "-").replace("\\&", "").replace("\\(aq", "'")
    text = re.sub(r"\\f[BIRP]", "", text)
    return [f"{page.relative_to(root)}: {rel} does not exist in the repository"
            for rel in _repo_paths(text, folders) if not _exists(root, rel)]


def _documents(root: Path) -> tuple[list[Path], list[Path]]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))], sorted((root / "man" / "man1").glob("*.1"))


def _check_tree(root: Path) -> list[str]:
    folders = _top_folders(root)
    assert {"docs", "man", "walctl", "scripts"} <= folders
    markdown, pages = _documents(root)
    assert len(markdown) >= 4 and len(pages) >= 14, f"README.md, docs/*.md and man/man1/*.1 are in {root}"
    problems = []
    for doc in markdown:
        problems += check_markdown(root, doc, folders)
    for page in pages:
        problems += check_manpage(root, page, folders)
    return problems


def test_every_relative_link_resolves_inside_a_clone(clone):
    problems = _check_tree(clone)
    assert not problems, "\n".join(problems)


def test_every_relative_link_resolves_in_the_working_tree(clone):
    # The same on the files as they are now (uncommitted edits included), so a broken
    # link shows before it is committed; the clone above is what users get.
    problems = _check_tree(REPO_ROOT)
    assert not problems, "\n".join(problems)


def test_the_specification_is_linked_from_readme_and_every_man_page(clone):
    readme = (clone / "README.md").read_text(encoding="utf-8")
    for doc in ("docs/FORMATS.md", "docs/CLI.md", "docs/STYLE.md"):
        assert f"]({doc})" in readme, f"README.md does not link {doc}"
    for page in _documents(clone)[1]:
        text = page.read_text(encoding="utf-8")
        for doc, _ in manpage.SPEC_DOCS:
            assert doc in text, f"{page.name} does not name {doc}"
    assert not re.search(r"\]\(\.\./", readme), "README.md links outside the repository"


@pytest.mark.parametrize("text,problem", [
    ("See [the spec](../shared/FORMATS.md).", "does not resolve inside the repository"),
    ("See [it](NOPE.md).", "does not resolve inside the repository"),
    ("See [it](CLI.md#no-such-heading).", "no heading with anchor"),
    ("See [it](#nowhere).", "no heading with anchor"),
    ("Run `scripts/no-such-script`.", "does not exist in the repository"),
    ("Pages: `man/*.9`.", "does not exist in the repository"),
    ("Byte layouts: `../../shared/FORMATS.md`.", "outside the repository"),
])
def test_the_checker_finds_a_broken_link(clone, tmp_path, text, problem):
    # The checker itself, on a document with one bad link.
    doc = clone / "docs" / "zz-checker-probe.md"
    try:
        doc.write_text("# Probe\n\n" + text + "\n", encoding="utf-8")
        problems = check_markdown(clone, doc, _top_folders(clone))
    finally:
        doc.unlink()
    assert len(problems) == 1 and problem in problems[0], problems


def test_the_checker_accepts_good_links(clone):
    doc = clone / "docs" / "zz-checker-probe.md"
    try:
        doc.write_text("# Probe\n\n## A `code` heading: too\n\n[a](#a-code-heading-too) [b](CLI.md#exit-codes-the-same-for-every-command-tested)"
                       " [c](../README.md#loop-devices) [d](https://example.org/x) `man/man1/*.1` `./store` `../README.md` `man/man1/walctl-<command>.1`\n",
                       encoding="utf-8")
        assert check_markdown(clone, doc, _top_folders(clone)) == []
    finally:
        doc.unlink()
