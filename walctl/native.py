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
