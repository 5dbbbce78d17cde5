"""Aligned buffers and the alignment rules every device I/O obeys.

O_DIRECT moves data between the device and user memory by DMA, so the kernel
insists that the file offset, the length and the buffer address are all
multiples of the device's logical block size; otherwise it returns EINVAL
(or, on some drivers, silently falls back). walctl uses 4096 everywhere: it is
a multiple of every logical block size we accept (512 or 4096) and it is the
page size, so page-aligned ``mmap`` memory always qualifies. The checks here
run before every syscall, on every device implementation, so a misaligned
request fails the same way in a unit test on memory as on a real disk.
"""

from __future__ import annotations

import ctypes
import mmap

# The unit of every offset, length and buffer address: the page size and the
# largest logical block size walctl accepts (devices with larger ones are refused).
from walctl.defaults import ALIGN  # the one home of the value, re-exported here


def align_up(n: int, a: int = ALIGN) -> int:
    """Round ``n`` up to a multiple of ``a``."""
    return -(-n // a) * a


def align_down(n: int, a: int = ALIGN) -> int:
    """Round ``n`` down to a multiple of ``a``."""
    return n // a * a


def aligned_buffer(size: int) -> mmap.mmap:
    """Return a zero-filled, page-aligned anonymous buffer usable for O_DIRECT.

    Args:
        size: bytes; a positive multiple of ALIGN.
    Raises:
        ValueError: size is not a positive multiple of ALIGN.
    """
    if not isinstance(size, int) or size <= 0 or size % ALIGN:
        raise ValueError(f"buffer size must be a positive multiple of {ALIGN}, got {size!r}")
    # An anonymous mapping starts on a page boundary and is zero-filled by the kernel.
    return mmap.mmap(-1, size)


def check_aligned(offset: int, length: int) -> None:
    """Raise ValueError unless offset and length are usable for direct I/O.

    Args:
        offset: byte position on the device; a non-negative multiple of ALIGN.
        length: byte count; a positive multiple of ALIGN.
    """
    if not isinstance(offset, int) or offset < 0 or offset % ALIGN:
        raise ValueError(f"offset must be a non-negative multiple of {ALIGN}, got {offset!r}")
    if not isinstance(length, int) or length <= 0 or length % ALIGN:
        raise ValueError(f"length must be a positive multiple of {ALIGN}, got {length!r}")


class _PyBuffer(ctypes.Structure):
    """The C ``Py_buffer`` struct, enough of it to learn a buffer's address."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),  # a plain pointer: PyBuffer_Release owns the reference
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None
_PYBUF_SIMPLE = 0  # ask for a plain contiguous byte buffer; others raise BufferError


def buffer_address(buf) -> int:
    """Return the memory address of a contiguous buffer (read-only ones too).

    ctypes' ``from_buffer`` only takes writable buffers, and pwrite is often given
    read-only ones, so ask the buffer protocol directly.
    """
    view = _PyBuffer()
    # pythonapi functions raise the Python error themselves when the call fails.
    _get_buffer(buf, ctypes.byref(view), _PYBUF_SIMPLE)
    try:
        return view.buf or 0
    finally:
        _release_buffer(ctypes.byref(view))


def check_buffer(buf) -> memoryview:
    """Return ``buf`` as a flat byte memoryview after checking it for direct I/O.

    The caller must release the returned view (``with check_buffer(buf) as mv``)
    so that an mmap buffer can be closed afterwards.

    Raises:
        ValueError: the buffer is not contiguous, its length is not a positive
            multiple of ALIGN, or its address is not ALIGN-aligned (a slice of an
            mmap that does not start on a 4096 boundary, bytes, bytearray).
    """
    try:
        view = memoryview(buf)
    except TypeError as exc:
        raise ValueError(f"not a buffer: {type(buf).__name__}") from exc
    if not view.c_contiguous:
        view.release()
        raise ValueError("buffer must be contiguous")
    flat = view.cast("B") if (view.format != "B" or view.ndim != 1) else view
    if flat is not view:
        view.release()
    length = flat.nbytes
    if length <= 0 or length % ALIGN:
        flat.release()
        raise ValueError(f"buffer length must be a positive multiple of {ALIGN}, got {length}")
    address = buffer_address(flat)
    if address % ALIGN:
        flat.release()
        raise ValueError(
            f"buffer address {address:#x} is not {ALIGN}-aligned (use aligned_buffer(), "
            f"and slice it only at multiples of {ALIGN})")
    return flat
