"""Device I/O for walctl: aligned buffers, positioned durable I/O, locks and safety checks.

Only this package touches file descriptors of the WAL device; it never prints.
"""

from walctl.lazynames import module_getattr

# Each name is imported from its module on first use (PEP 562): a command that needs aligned
# buffers only (the local store's reads) does not load locks, safety checks and device creation.
_HOMES = {
    "Device": "base",
    "ALIGN": "buffers", "align_down": "buffers", "align_up": "buffers", "aligned_buffer": "buffers",
    "buffer_address": "buffers", "check_aligned": "buffers", "check_buffer": "buffers",
    "create_file": "create", "zero_fill": "create",
    "FaultyDevice": "fakes", "MemoryDevice": "fakes",
    "BufferedDevice": "fdio", "DirectDevice": "fdio",
    "LockEntry": "locks", "lock_holder": "locks", "parse_proc_locks": "locks",
    "BUFFERED_WARNING": "opening", "open_device": "opening",
    "SIGNATURE_READ_BYTES": "safety", "check_safe_to_overwrite": "safety", "detect_signature": "safety",
    "holders": "safety", "mount_points": "safety",
}


__getattr__ = module_getattr(__name__, _HOMES, globals())


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__all__ = [
    "ALIGN",
    "BUFFERED_WARNING",
    "BufferedDevice",
    "Device",
    "DirectDevice",
    "FaultyDevice",
    "LockEntry",
    "MemoryDevice",
    "SIGNATURE_READ_BYTES",
    "align_down",
    "align_up",
    "aligned_buffer",
    "buffer_address",
    "check_aligned",
    "check_buffer",
    "check_safe_to_overwrite",
    "create_file",
    "detect_signature",
    "holders",
    "lock_holder",
    "mount_points",
    "open_device",
    "parse_proc_locks",
    "zero_fill",
]
