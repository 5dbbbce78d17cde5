"""A package's names loaded from their modules on first use (PEP 562), so that importing the
package costs nothing until a name is asked for: walctl.device and walctl.cli use it to keep
a command's start-up to the modules it runs."""

from __future__ import annotations

import importlib
from collections.abc import Callable  # (not typing: its import is a tenth of `walctl --version`)


def module_getattr(package: str, homes: dict[str, str], namespace: dict[str, object]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package``: ``homes`` maps each name to the sub-module that
    defines it; a name's value, once loaded, is kept in ``namespace`` (the package's globals)."""

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        namespace[name] = value
        return value

    return __getattr__
