"""Human sizes on the command line and in output: ``4096``, ``4KiB``, ``256KiB``, ``2GiB``, ``1GB``."""

from __future__ import annotations

import re

from walctl.errors import UsageError

# dd's convention: a bare K/M/G/T is binary, "KB"/"MB"/... is decimal, "KiB"/... binary.
_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kib": 1 << 10, "kb": 10**3,
    "m": 1 << 20, "mib": 1 << 20, "mb": 10**6,
    "g": 1 << 30, "gib": 1 << 30, "gb": 10**9,
    "t": 1 << 40, "tib": 1 << 40, "tb": 10**12,
}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Parse a size in bytes; raises UsageError naming the bad text."""
    if isinstance(text, int):
        if text < 0:
            raise UsageError(f"size must not be negative: {text}")
        return text
    match = _SIZE_RE.match(text)
    if not match or match.group(2).lower() not in _UNITS:
        raise UsageError(f"bad size {text!r}", hint="use bytes or a unit: 4096, 4KiB, 256KiB, 2GiB, 1GB")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def format_size(n: int) -> str:
    """Render bytes the way operators read them: ``1.5 MiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|)\s*$")
_DURATION_UNITS = {"ms": 0.001, "": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Parse a duration in seconds: ``90``, ``90s``, ``30m``, ``1h``, ``2d``, ``500ms``."""
    match = _DURATION_RE.match(text)
    if not match:
        raise UsageError(f"bad duration {text!r}", hint="use seconds or a unit: 90s, 30m, 1h, 2d")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def plural(count: int, word: str, plural_word: str | None = None) -> str:
    """``1 record``, ``2 records``, ``0 records`` (docs/CLI.md's plural rule; a leaf, so every
    layer's messages can follow it; walctl.human re-exports it)."""
    return f"{count:,} {word if count == 1 else (plural_word or word + 's')}"
