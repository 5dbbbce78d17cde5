"""Whether walctl runs its C extension, walctl.format._native (issue 19), or the pure-Python twins.

The one rule (walctl.native, shared with walctl.device.aio), for every module with a C path
(walctl.format.bulk, walctl.format.crc's combine, and through bulk walctl.pipeline.rowcopy): the
extension runs when it was built (``pip install`` with a compiler) and WALCTL_NO_NATIVE is unset
or "0". Each user then checks what it needs of the build (bulk: its row layout; the others:
their functions), a stale build falling back to the twins.
"""

from __future__ import annotations

from walctl.native import load_extension


def load_native():
    """walctl.format._native, or None: not built, or WALCTL_NO_NATIVE set (walctl.native's rule)."""
    return load_extension("walctl.format._native")
