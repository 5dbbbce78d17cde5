"""The two checksums walctl meets: CRC-32C for its own formats, AutoMQ's masked CRC-32 for forensics."""

from __future__ import annotations

import zlib


def _crc32c_extension():
    """The crc32c package's C extension, loaded without the package's __init__: that imports
    importlib.metadata (for its __version__), a good part of a short command's start-up. Any
    surprise in the package's layout: the package itself."""
    import sys

    loaded = sys.modules.get("crc32c._crc32c")
    if loaded is not None:
        return loaded
    try:
        import importlib.util
        from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader
        from pathlib import Path

        package = importlib.util.find_spec("crc32c")  # finds it, runs nothing
        for directory in package.submodule_search_locations:
            for suffix in EXTENSION_SUFFIXES:
                path = Path(directory, "_crc32c" + suffix)
                if path.is_file():
                    loader = ExtensionFileLoader("crc32c._crc32c", str(path))
                    spec = importlib.util.spec_from_file_location("crc32c._crc32c", path, loader=loader)
                    module = importlib.util.module_from_spec(spec)
                    loader.exec_module(module)
                    sys.modules["crc32c._crc32c"] = module  # what ``import crc32c`` would load, shared
                    return module
    except Exception:  # noqa: BLE001 - any surprise: the ordinary import below
        pass
    import crc32c

    return crc32c


# CRC-32C (Castagnoli), full 32 bits: crc32c(data, value=0), ``value`` continuing an earlier
# checksum. The C library's function itself, not a wrapper: no Python frame per call on the
# hot paths (every record header and body, every object block).
crc32c = _crc32c_extension().crc32c


def automq_crc(data: bytes | bytearray | memoryview) -> int:
    """AutoMQ's header checksum: java.util.zip.CRC32 masked to a non-negative int."""
    return zlib.crc32(data) & 0x7FFFFFFF


# --- combining CRC-32C values (zlib's crc32_combine, for the Castagnoli polynomial) -----------
# A CRC is a polynomial remainder, so crc(A + B) follows from crc(A), crc(B) and len(B): shift
# crc(A) by len(B) zero bytes (a multiplication by x^(8 len(B)) modulo the polynomial) and add
# crc(B). Compaction uses it to checksum an object assembled by server-side copy from the
# checksums of its parts, without reading the parts.

_CRC32C_POLY = 0x82F63B78  # Castagnoli, bit-reflected


def _multmodp(a: int, b: int) -> int:
    """a * b modulo the CRC polynomial (reflected bit order: x^0 is the top bit)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ _CRC32C_POLY if b & 1 else b >> 1
    return p


# x^(2^k) for k = 0..66: a length below 2^64 bytes is 8 * length < 2^67 bits. zlib keeps 32 and
# wraps k at 32, which holds for CRC-32's polynomial (x^(2^32) = x) but not for Castagnoli's:
# there the wrap gave wrong combines for len(B) >= 512 MiB (2^32 bits).
_X2N_ENTRIES = 67


def _x2n_table() -> tuple[int, ...]:
    table = [1 << 30]  # x^1
    for _ in range(_X2N_ENTRIES - 1):
        table.append(_multmodp(table[-1], table[-1]))  # x^(2^k)
    return tuple(table)


_X2N = _x2n_table()


def _x8nmodp(length: int) -> int:
    """x^(8 * length) modulo the CRC polynomial."""
    p = 1 << 31  # x^0
    k = 3  # 8 = 2^3
    while length:
        if length & 1:
            p = _multmodp(_X2N[k], p)
        length >>= 1
        k += 1
    return p


def _crc32c_combine_py(crc_a: int, crc_b: int, length_b: int) -> int:
    """crc32c_combine in pure Python: the twin of walctl.format._native.crc32c_combine."""
    if length_b < 0:
        raise ValueError(f"length must be >= 0, got {length_b}")
    return _multmodp(_x8nmodp(length_b), crc_a) ^ crc_b


def _div_x(v: int) -> int:
    """v / x modulo the CRC polynomial (reflected bit order: x^0 is the top bit)."""
    return (((v ^ _CRC32C_POLY) << 1) | 1) & 0xFFFFFFFF if v & (1 << 31) else (v << 1) & 0xFFFFFFFF


def _x_minus_8() -> int:
    v = 1 << 31  # x^0
    for _ in range(8):
        v = _div_x(v)
    return v


_X_MINUS_8 = _x_minus_8()  # x^-8 (the polynomial has an x^0 term, so x has an inverse modulo it)


def crc32c_unshift(crc: int, length: int) -> int:
    """The inverse of ``crc32c_combine(crc, 0, length)``: ``crc`` times x^(-8 * length), so that
    ``crc32c_unshift(crc32c_combine(c, 0, n), n) == c``. Split uses it to derive the crc of a run of
    an object from the object's crc and the crcs of the bytes before and after the run."""
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    base, result = _X_MINUS_8, 1 << 31
    while length:
        if length & 1:
            result = _multmodp(base, result)
        base = _multmodp(base, base)
        length >>= 1
    return _multmodp(result, crc)


_combine = None  # the implementation crc32c_combine calls, chosen on its first call


def _combine_impl():
    """The C crc32c_combine when walctl runs its extension (walctl.format.extension's rule) and
    the build has it, else the Python twin. Loaded here, at the first combine, not at start-up:
    most commands never combine."""
    global _combine
    if _combine is None:
        from walctl.format.extension import load_native

        _combine = getattr(load_native(), "crc32c_combine", None) or _crc32c_combine_py
    return _combine


def crc32c_combine(crc_a: int, crc_b: int, length_b: int) -> int:
    """crc32c(A + B) from crc32c(A), crc32c(B) and len(B), without the bytes (in C when built)."""
    return (_combine or _combine_impl())(crc_a, crc_b, length_b)
