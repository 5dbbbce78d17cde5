"""Whether walctl runs a C extension of its own or the pure-Python twin beside it.

The one rule, for every C path (walctl.format._native through walctl.format.extension,
walctl.device._aio through walctl.device.aio): an extension runs when it was built (``pip
install`` with a compiler) and WALCTL_NO_NATIVE is unset or "0". A base module, so that format/
and device/, which never import each other, read the same rule.
"""

from __future__ import annotations

import importlib
import os


def load_extension(name: str):
    """The extension module ``name`` (e.g. "walctl.format._native"), or None: not built, or
    WALCTL_NO_NATIVE set."""
    if os.environ.get("WALCTL_NO_NATIVE", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
KEEP_TRIM_BYTES = 32 << 20  # free memory at the heap's top kept for later allocations, not given back
# Allocations below this come from the heap (and its freed memory): recover --json --payload hex
# renders a read-ahead run (2 MiB of payload) into some 4.2 MiB of lines at a time; under 4 MiB here
# each came in fresh pages (1 GiB of 64 KiB records: 1.6-1.8 s wall, 0.85 s of it system time,
# against 1.02 s and 0.07 at 8 MiB; --payload none 0.86 s; RSS 42 MB either way).
KEEP_MMAP_BYTES = 8 << 20
_MALLOC_ENV = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")
_kept = []


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep freed memory for the next allocations of this process (append, and
    recover/read rendering payloads; issue 31).

    By default it gives the free top of its heap back to the system past a threshold (128 KiB, raised
    with the largest freed mmap'd chunk), and a 100-byte-record append allocates some 220 KB of
    acknowledgement text a block, freed once the block is acknowledged: each block's text then came
    in fresh pages, about 50 page faults a block and the kernel zeroing them (a sixth of that append's
    CPU). Allocations under KEEP_MMAP_BYTES now come from the heap and up to KEEP_TRIM_BYTES of its
    free top stay. Nothing where the environment tunes malloc itself, or without glibc's mallopt.
    Returns True once the settings are made (once a process)."""
    if _kept:
        return _kept[0]
    ok = False
    if not any(name in os.environ for name in _MALLOC_ENV):
        try:
            import ctypes

            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):  # no C library by that name, or no mallopt in it (not glibc)
            mallopt = None
        if mallopt is not None:
            ok = bool(mallopt(M_MMAP_THRESHOLD, KEEP_MMAP_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, KEEP_TRIM_BYTES))
    _kept.append(ok)
    return ok
