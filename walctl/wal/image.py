"""walctl image: copy a WAL device into a file, with its sha256, so forensics works on a copy.

The source is opened read-only (O_DIRECT, no lock: a live writer is neither blocked nor
disturbed) and never written. The copy goes to ``FILE.partial`` first and is renamed to
FILE only once complete and durable, so an interrupted run never leaves a plausible but
short image under the requested name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import hashlib
import os
import time
from dataclasses import dataclass, field

from walctl.device.blockio import open_device
from walctl.device.buffers import aligned_buffer
from walctl.errors import FormatError, IOFailure, NotFoundError, RefusedError, UsageError
from walctl.failpoints import failpoint
from walctl.wal.headers import read_headers
from walctl.wal.layout import align_down

if TYPE_CHECKING:
    from walctl.device.base import Device

COPY_CHUNK_BYTES = 8 << 20  # aligned reads of 8 MiB: few syscalls, bounded memory


@dataclass
class ImageResult:
    source: str
    target: str
    sha256: str
    sha256_path: str
    size_bytes: int
    scope: str  # "capacity" (the WAL's header says how much) or "device" (all of it)
    flavour: str | None  # the WAL header's flavour, None when no valid header was found
    capacity_bytes: int | None
    device_size_bytes: int
    elapsed_s: float
    warnings: list[str] = field(default_factory=list)

    @property
    def mib_per_s(self) -> float:
        return self.size_bytes / (1 << 20) / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "file": self.target,
            "sha256": self.sha256,
            "sha256_file": self.sha256_path,
            "size_bytes": self.size_bytes,
            "scope": self.scope,
            "flavour": self.flavour,
            "capacity_bytes": self.capacity_bytes,
            "device_size_bytes": self.device_size_bytes,
            "elapsed_s": round(self.elapsed_s, 3),
            "mib_per_s": round(self.mib_per_s, 1),
        }


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def image_device(source: str, target: str, *, whole_device: bool = False, force: bool = False,
                 progress=None) -> ImageResult:
    """Copy ``source`` (its WAL capacity, or the whole device) into ``target`` and hash it.

    Writes ``target`` and ``target.sha256`` (``sha256sum -c`` format). Never writes the source.
    ``progress(done, total)``, if given, is called with the bytes copied so far.

    Raises:
        NotFoundError: no such source. UsageError: source is not a device or file.
        RefusedError: target (or its .sha256) exists and no ``force``; target is the source.
        IOFailure: a read or write failed.
    """
    sha_path = target + ".sha256"
    if os.path.lexists(source) and os.path.lexists(target) and _same_file(source, target):
        raise RefusedError("the image file is the source device itself", where=target,
                           hint="choose another FILE; image never writes to its source")
    dev = open_device(source, writable=False)
    try:
        for path in (target, sha_path):
            if os.path.lexists(path) and not force:
                raise RefusedError("the file already exists", where=path,
                                   hint="pass --force to overwrite it")
        if os.path.isdir(target):
            raise UsageError("is a directory", where=target, hint="name the image file to create")
        device_size = dev.size_bytes
        flavour = capacity = None
        scope = "device"
        warnings = list(dev.warnings)
        size = device_size
        try:
            header = read_headers(dev).header
            flavour, capacity = header.flavour, header.capacity
        except (FormatError, NotFoundError, IOFailure):
            if not whole_device:
                warnings.append(f"{source}: no valid WAL header: copying the whole device")
        if capacity is not None and not whole_device:
            if capacity <= device_size:
                size, scope = capacity, "capacity"
            else:
                warnings.append(f"{source}: header capacity {capacity} bytes exceeds the device "
                                f"({device_size} bytes): copying the whole device")
        started = time.monotonic()
        digest = _copy(dev, source, target, size, progress)
        elapsed = time.monotonic() - started
    finally:
        dev.close()
    _write_checksum(sha_path, digest, os.path.basename(target))
    return ImageResult(source, target, digest, sha_path, size, scope, flavour, capacity, device_size,
                       elapsed, warnings)


def _copy(dev: Device, source: str, target: str, size: int, progress=None) -> str:
    """Copy ``size`` bytes into ``target`` through ``target.partial``; returns the sha256 hex."""
    partial = target + ".partial"
    digest = hashlib.sha256()
    aligned = align_down(size)
    buf = aligned_buffer(min(COPY_CHUNK_BYTES, max(aligned, 4096)))
    try:
        out = open(partial, "wb")
    except OSError as exc:
        raise IOFailure(f"cannot create the image file: {exc.strerror}", where=partial,
                        hint="FILE must be in an existing, writable directory") from exc
    try:
        with out:
            for start in range(0, aligned, len(buf)):
                view = memoryview(buf)[:min(len(buf), aligned - start)]
                dev.pread_into(start, view)
                failpoint("image-copy")
                digest.update(view)
                out.write(view)
                if progress is not None:
                    progress(start + len(view), size)
            if size > aligned:
                # A regular file whose size is not a multiple of 4096: O_DIRECT cannot read its
                # last partial block, so that tail is read through the page cache (read-only).
                with open(source, "rb") as f:
                    f.seek(aligned)
                    tail = f.read(size - aligned)
                if len(tail) != size - aligned:
                    raise IOFailure(f"short read of the last {size - aligned} bytes", where=source, offset=aligned)
                digest.update(tail)
                out.write(tail)
            out.flush()
            os.fsync(out.fileno())  # the image is durable before it takes its final name
        os.replace(partial, target)
    except BaseException as exc:
        try:
            os.unlink(partial)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise IOFailure(f"writing the image failed: {exc.strerror}", where=partial) from exc
        raise
    _fsync_dir(target)
    return digest.hexdigest()


def _write_checksum(path: str, digest: str, name: str) -> None:
    try:
        # The name as the file system has it (any bytes: sha256sum -c reads it back so).
        with open(path, "wb") as f:
            f.write(f"{digest}  ".encode("ascii") + os.fsencode(name) + b"\n")
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(path)
    except OSError as exc:
        raise IOFailure(f"writing the checksum file failed: {exc.strerror}", where=path) from exc


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
