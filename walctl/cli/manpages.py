"""Where this install's man pages are, for the hint ``walctl --help`` ends with.

``pip install``/``pipx install`` put them in <prefix>/share/man/man1 (pyproject's data-files),
where man finds them when <prefix>/bin is on PATH or <prefix> is a standard prefix; pipx before
1.2 (Debian's 1.1.0) does not link them into ~/.local/share/man, and an editable install (the
README's .venv) has none: its pages are the checkout's man/man1. So the help names the folder to
put on MANPATH (tests/install/test_man.py runs man with it, for each install path).
"""

from __future__ import annotations

import sys
from pathlib import Path


def man_dir() -> str | None:
    """The first folder holding man1/walctl.1: the running environment's share/man, the prefix the
    walctl package is installed under (``--prefix``, ``--target``-less installs), a checkout's man/."""
    here = Path(__file__).resolve()
    candidates = [Path(sys.prefix) / "share" / "man"]
    if len(here.parents) > 5:
        candidates.append(here.parents[5] / "share" / "man")  # <prefix>/lib/pythonX.Y/site-packages/walctl/cli
    candidates.append(here.parents[2] / "man")  # a checkout (editable install): <repo>/man/man1
    for folder in candidates:
        if (folder / "man1" / "walctl.1").is_file():
            return str(folder)
    return None


def hint() -> str:
    """The lines of the root --help's man page hint."""
    folder = man_dir()
    if folder is None:
        return "  Man pages: not installed with this copy of walctl (scripts/gen-man makes them in man/man1)."
    return ("  Man pages: man walctl, man walctl-COMMAND; if man does not find them:\n"
            f"    $ export MANPATH=\"{folder}:$(manpath)\"")
