"""Device I/O for walctl: aligned buffers, positioned durable I/O, locks and safety checks.

Only this package touches file descriptors of the WAL device; it never prints.
"""

from walctl.device.base import Device
from walctl.device.buffers import (
    ALIGN,
    align_down,
    align_up,
    aligned_buffer,
    buffer_address,
    check_aligned,
    check_buffer,
)
from walctl.device.create import create_file, zero_fill
from walctl.device.fakes import FaultyDevice, MemoryDevice
from walctl.device.fdio import BufferedDevice, DirectDevice
from walctl.device.locks import LockEntry, lock_holder, parse_proc_locks
from walctl.device.opening import BUFFERED_WARNING, open_device
from walctl.device.safety import (
    SIGNATURE_READ_BYTES,
    check_safe_to_overwrite,
    detect_signature,
    holders,
    mount_points,
)

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
