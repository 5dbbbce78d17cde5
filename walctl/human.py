"""Human output in one style (docs/CLI.md "Output"): labels, not snake_case keys; sizes in
KiB/MiB/GiB; ISO-8601 times; "-" for none; "yes"/"no"; plural agreement.

Commands render their JSON result objects through these helpers, so the human and the machine
views show the same facts. JSON output never goes through here.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Iterable

from walctl.sizes import plural  # noqa: F401 (re-exported: the rule lives in the leaf module)

NONE = "-"

# Words a plain capitalisation of the key would get wrong.
_WORDS = {"wal": "WAL", "crc": "CRC", "sha256": "SHA-256", "mib": "MiB", "iops": "IOPS", "us": "µs",
          "json": "JSON", "url": "URL"}
_UNIT_SUFFIXES = ("bytes", "ns", "s")  # dropped from the end of a label: the value shows its unit


def label(key: str) -> str:
    """``capacity_bytes`` -> ``capacity``; ``last_write_timestamp_ns`` -> ``last write``; ``node_id`` -> ``node id``."""
    if key.endswith("_per_s"):  # a rate: mib_per_s -> MiB/s
        return label(key[:-len("_per_s")]) + "/s"
    words = key.split("_")
    if key.endswith("_timestamp_ns") or key.endswith("_timestamp_seconds"):
        words = words[:-2]
    elif key.endswith("_seconds"):
        words = words[:-1]
    if len(words) > 1 and words[-1] in _UNIT_SUFFIXES:
        words = words[:-1]
    out = [_WORDS.get(w, w) for w in words]
    text = " ".join(w for w in out if w)
    return text or key




def size(n: int | None, exact: bool = False) -> str:
    """``1.5 MiB`` (``1,572,864 B (1.5 MiB)`` with ``exact``); "-" for none."""
    from walctl.sizes import format_size

    if n is None:
        return NONE
    text = format_size(n)
    if exact and n >= 1024:
        return f"{n:,} B ({text})"
    return text


def rate(bytes_per_s: float | None) -> str:
    """A transfer rate in binary units, like sizes: ``1.5 MiB/s``, ``512 B/s``; "-" for none."""
    if bytes_per_s is None:
        return NONE
    return size(max(0, int(bytes_per_s))) + "/s"


def iso_ns(ns: int | None) -> str:
    """Nanoseconds since the epoch as ISO-8601 UTC to the millisecond; "-" for none or 0."""
    if not ns or ns < 0:
        return NONE
    return iso_s(ns / 1e9)


def iso_s(seconds: float | None) -> str:
    if seconds is None or seconds <= 0:
        return NONE
    moment = _dt.datetime.fromtimestamp(seconds, tz=_dt.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return NONE
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 120:
        return f"{seconds:.3f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def value(key: str, v: Any) -> str:
    """One JSON value as a person reads it, chosen by its key's unit suffix."""
    if v is None:
        return NONE
    if isinstance(v, bool):
        return "yes" if v else "no"
    if key.endswith("_timestamp_ns") and isinstance(v, int):
        return iso_ns(v)
    if (key.endswith("_timestamp_seconds") or key in ("time", "marked_at", "prepared_at", "expires_at")) \
            and isinstance(v, (int, float)):
        return iso_s(v)
    if (key.endswith("_bytes") or key.startswith("bytes_")) and isinstance(v, int):
        return size(v, exact=True)
    if key.endswith("_per_s") and isinstance(v, (int, float)):
        return f"{v:,.1f}"
    if key.endswith("_seconds") or key == "seconds" or key.endswith("_s"):
        return duration(v) if isinstance(v, (int, float)) else str(v)
    if isinstance(v, (list, tuple)):
        return ", ".join(value(key, x) for x in v) if v else NONE
    if isinstance(v, dict):
        return ", ".join(f"{label(k)} {value(k, x)}" for k, x in v.items()) if v else NONE
    if isinstance(v, int):
        return str(v)
    return str(v)


def kv_table(rows: Iterable[tuple[str, str]], title: str | None = None):
    """A two-column rich table (label, value), titled, values never read as rich markup."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(title) if title else None, show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    for name, text in rows:
        table.add_row(name, Text(text))
    return table


def json_rows(obj: dict, skip: Iterable[str] = ()) -> list[tuple[str, str]]:
    """Rows of a JSON result object: each key labelled, each value rendered by ``value``."""
    skipped = set(skip)
    return [(label(k), value(k, v)) for k, v in obj.items() if k not in skipped]
