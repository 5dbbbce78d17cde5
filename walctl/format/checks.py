"""Shared decode checks, in the house order: truncated, all-zero, magic, checksum, bounds."""

from __future__ import annotations

from contextlib import contextmanager

from walctl.errors import BadMagicError, BoundsError, ChecksumError, FormatError, TruncatedError, ZeroedError


def need(buf, offset: int, size: int, what: str) -> memoryview:
    """Return the ``size`` bytes at ``offset`` or raise TruncatedError with the position."""
    if offset < 0:
        raise BoundsError(f"{what}: negative position {offset}", offset=offset)
    view = memoryview(buf)[offset:offset + size]
    if len(view) < size:
        raise TruncatedError(f"{what} truncated: need {size} bytes, found {len(view)}",
                             offset=offset, expected=size, found=len(view))
    return view


def not_zero(view: memoryview, offset: int, what: str) -> None:
    """All-zero bytes are a never-written or torn structure, not a bad magic."""
    if not any(view):
        raise ZeroedError(f"{what} is all zeros (never written or torn)", offset=offset)


def magic(found: int, expected: int | tuple[int, ...], offset: int, what: str, width: int = 8) -> None:
    wanted = expected if isinstance(expected, tuple) else (expected,)
    if found not in wanted:
        exp = " or ".join(f"0x{m:0{width}X}" for m in wanted)
        raise BadMagicError(f"{what}: bad magic 0x{found:0{width}X}, expected {exp}",
                            offset=offset, expected=wanted[0], found=found)


def crc(found: int, expected: int, offset: int, what: str) -> None:
    if found != expected:
        raise ChecksumError(f"{what}: crc mismatch, stored 0x{found:08X}, computed 0x{expected:08X}",
                            offset=offset, expected=expected, found=found)


def bound(ok: bool, offset: int, what: str, found: object, rule: str) -> None:
    if not ok:
        raise BoundsError(f"{what} = {found} out of bounds ({rule})", offset=offset, found=found, field=what)


@contextmanager
def relocated(delta: int):
    """Turn positions of errors raised inside from buffer positions into object positions."""
    try:
        yield
    except FormatError as exc:
        if exc.offset is not None:
            exc.offset += delta
        raise
