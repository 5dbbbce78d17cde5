"""Getting a bench target ready: safety checks, creating a file, refusing a WAL with live records."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from walctl.device import safety
from walctl.device.base import Device
from walctl.device.blockio import create_file, open_device, zero_fill
from walctl.device.buffers import align_down, aligned_buffer
from walctl.errors import NotFoundError, RefusedError, UsageError, WalctlError
from walctl.format.header import HEADERS_SIZE
from walctl.wal import reader
from walctl.wal.headers import decode_slots


@dataclass
class Target:
    """An opened, locked device (or file) and the region bench may overwrite: [0, size_bytes)."""

    path: str
    dev: object
    size_bytes: int
    created: bool
    warnings: list[str] = field(default_factory=list)


def open_target(path: str, size_bytes: int | None, *, force: bool, created_paths: list[str] | None = None) -> Target:
    """Open ``path`` for destructive writes, creating it as a file of ``size_bytes`` if missing.

    A new file is written once with zeros (like fio's layout), so the runs measure
    overwrites, not block allocation. The device stays locked until ``dev.close()``.

    Raises:
        UsageError: no --size for a new file, or --size larger than the device.
        RefusedError: mounted or held (always), a filesystem/partition signature or a
            WAL with live records (unless ``force``), another writer.
    """
    if size_bytes is not None:
        size_bytes = align_down(size_bytes)
        if size_bytes <= 0:
            raise UsageError("--size must be at least 4096 bytes", where=path)
    warnings: list[str] = []
    created = not os.path.lexists(path)
    if created:
        _create(path, size_bytes, created_paths)
    else:
        warnings += safety.check_safe_to_overwrite(path, force=force)
    try:
        dev = open_device(path, writable=True)
    except BaseException:
        if created:
            remove_file(path)
        raise
    try:
        size = _prepare(dev, path, size_bytes, created, force)
    except BaseException:
        dev.close()
        if created:
            remove_file(path)
        raise
    return Target(path, dev, size, created, warnings + dev.warnings)


def _create(path: str, size_bytes: int | None, created_paths: list[str] | None) -> None:
    """Create the missing ``path`` as a file of ``size_bytes`` (noted in ``created_paths`` first)."""
    safety.refuse_under_dev(path)  # a /dev typo: no such device, never a RAM file benchmarked as the disk
    if size_bytes is None:
        raise UsageError("--size is required to create a new file", where=path,
                         hint="bench DEVICE --size 1GiB creates a file of that size; a device is used as it is")
    # The caller learns of the file before it exists, so that an interrupt landing anywhere
    # from here on still removes it (remove_file tolerates a file that never came to be).
    if created_paths is not None:
        created_paths.append(path)
    try:
        create_file(path, size_bytes)
    except RefusedError:
        if created_paths is not None:
            created_paths.remove(path)  # someone else's file appeared meanwhile: never ours to remove
        raise


def _prepare(dev, path: str, size_bytes: int | None, created: bool, force: bool) -> int:
    """The region's size on the opened device: a created file zero-filled; a device holding a
    WAL with live records refused unless ``force``."""
    size = size_bytes if size_bytes is not None else align_down(dev.size_bytes)
    if size > dev.size_bytes:
        raise UsageError(f"--size {size} bytes is larger than the device ({dev.size_bytes} bytes)", where=path)
    if created:
        zero_fill(dev, 0, size)
    elif not force:
        held = live_wal(dev)
        if held:
            raise RefusedError(f"the device holds {held}", where=path,
                               hint="bench would destroy it; pass --force to overwrite")
    return size


def live_wal(dev: Device) -> str | None:
    """Describe the WAL with live records on ``dev``, or None (no WAL, or an empty one).

    A valid header plus a scan that finds a record. A WAL walctl cannot scan (an
    AutoMQ WAL, or a header that does not fit the device) counts as holding records.
    """
    if dev.size_bytes < HEADERS_SIZE:
        return None
    buf = aligned_buffer(HEADERS_SIZE)
    dev.pread_into(0, buf)
    try:
        header = decode_slots(buf).header
    except NotFoundError:
        return None
    if header.flavour != "walctl":
        return f"an {header.flavour} WAL"
    if header.capacity > dev.size_bytes:
        return "a WAL whose header does not fit the device"
    try:
        for item in reader.scan(dev, header, probe=False):
            if isinstance(item, reader.Entry):
                return f"a walctl WAL with live records (the first at offset {item.offset})"
    except WalctlError as exc:
        return f"a WAL that cannot be scanned ({exc.what})"
    return None


def remove_file(path: str) -> bool:
    """Delete a file bench created; False if it was already gone."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
