"""Helpers the benches share."""

from __future__ import annotations

import os
from typing import Iterable


def evict(paths: str | Iterable[str]) -> None:
    """Drop these files from the page cache (synced first, so dirty pages go too): the next read
    comes from the disk, as walctl's O_DIRECT reads do. Only these files: the machine's cache
    (other engineers' files, the interpreter's) is left alone."""
    for path in [paths] if isinstance(paths, str) else paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
