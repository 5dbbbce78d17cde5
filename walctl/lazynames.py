"""A module's names loaded from their modules on first use (PEP 562), so that importing it costs
nothing until a name is asked for: walctl.device, walctl.cli and walctl.store (S3Store), and the
modules that re-export what only rare paths use (walctl.format.object: AutoMQ's composite
objects; walctl.wal.reader: the AutoMQ scan's constant) keep a command's start-up to the modules
it runs."""

from __future__ import annotations

import importlib
from collections.abc import Callable  # (not typing: its import is a tenth of `walctl --version`)


def module_getattr(module: str, homes: dict[str, str], namespace: dict[str, object], *,
                   package: str | None = None) -> Callable[[str], object]:
    """A ``__getattr__`` for ``module`` (a package, or a module re-exporting names): ``homes`` maps
    each name to the module of ``package`` (default: ``module`` itself, a package) that defines
    it; a name's value, once loaded, is kept in ``namespace`` (the module's globals)."""
    where = module if package is None else package

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{where}.{home}"), name)
        namespace[name] = value
        return value

    return __getattr__
