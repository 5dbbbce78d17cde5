"""docs/CLI.md's plural rule, in the source: no message writes "record(s)" or "problem(s)"; it says
"1 record" or "2 records" (walctl.sizes.plural). The examples' output is checked by
tests/cli/test_examples.py; this catches the lines no example reaches (errors, warnings, plans)."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

WALCTL = Path(__file__).resolve().parents[2] / "walctl"
PARENS_S = re.compile(r"[A-Za-z]\(s\)")
TRIPLE = ('"' * 3, "'" * 3)
FSTRING_START = getattr(tokenize, "FSTRING_START", None)  # (Python 3.12+ splits f-strings up)
FSTRING_MIDDLE = getattr(tokenize, "FSTRING_MIDDLE", None)
FSTRING_END = getattr(tokenize, "FSTRING_END", None)


def _message_strings(path: Path):
    """(line, text) of each string literal that is not triple-quoted (docstrings may say "(s)")."""
    source = path.read_text(encoding="utf-8")
    triple: list[bool] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        quoted = tok.string.lstrip("rRbBuUfF")
        if FSTRING_START is not None and tok.type == FSTRING_START:
            triple.append(quoted.startswith(TRIPLE))
        elif FSTRING_END is not None and tok.type == FSTRING_END:
            triple.pop()
        elif FSTRING_MIDDLE is not None and tok.type == FSTRING_MIDDLE and triple and not triple[-1]:
            yield tok.start[0], tok.string
        elif tok.type == tokenize.STRING and not quoted.startswith(TRIPLE):
            yield tok.start[0], tok.string


def test_no_message_says_word_s_in_parentheses():
    found = [f"{path.relative_to(WALCTL.parent)}:{line}: {text}"
             for path in sorted(WALCTL.rglob("*.py"))
             for line, text in _message_strings(path) if PARENS_S.search(text)]
    assert not found, "use walctl.sizes.plural (docs/CLI.md: plurals):\n" + "\n".join(found)


def test_the_check_sees_a_planted_one(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text('def f(n):\n    """Docstrings may say record(s)."""\n    return f"{n} record(s) lost"\n')
    assert [line for line, text in _message_strings(planted) if PARENS_S.search(text)] == [3]
