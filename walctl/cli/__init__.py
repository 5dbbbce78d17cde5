"""The walctl CLI: the app and its command registration (app.py), the CLI conventions
(conventions.py), the one error -> exit boundary (boundary.py) and the error output (render.py).

Nothing imports this package but the entry points (``walctl = "walctl.cli:main"``,
``python -m walctl``) and tests: commands take what they share from walctl.commands._shared.

The names below are imported from their modules on first use, so that ``walctl --version``
answers without importing typer (two thirds of its run otherwise); ``walctl.cli.app`` is the
whole app (typer.Typer), as it always was, even after the module of that name is imported.
"""

from __future__ import annotations

import sys
import types
from walctl.lazynames import module_getattr

_HOMES = {"Interrupted": "boundary", "WalctlGroup": "boundary", "boundary": "boundary",
          "interrupted_error": "boundary", "usage_line": "boundary", "register": "app",
          "apply_conventions": "conventions", "env_name": "conventions", "normalise_args": "conventions"}
_VERSION_ONLY = (["--version"], ["-V"])
# Commands that open a device read-only and look up who holds it (walctl.device.locks.lock_holder).
_READERS = ("recover", "status")


def _command_of(args: list[str]) -> str | None:
    """The command word of a command line (root options take no value), or None."""
    for token in args:
        if token == "--" or not token.startswith("-"):
            return token if token != "--" else None
    return None


def main() -> None:
    """Console-script entry point: the app built with the invoked command's module only."""
    import os

    if sys.argv[1:] in _VERSION_ONLY and not os.environ.get("_WALCTL_COMPLETE"):
        # Exactly what the root's eager --version option prints, without building the app.
        from walctl import __version__

        sys.stdout.write(f"walctl {__version__}\n")
        sys.stdout.flush()
        sys.exit(0)
    if _command_of(sys.argv[1:]) in _READERS and not os.environ.get("_WALCTL_COMPLETE"):
        from walctl.device import locks

        locks.prefetch()  # who holds the device: read while the imports below run
    from walctl.cli import startup

    startup.pause_collection()
    try:
        from walctl.cli.app import main as run

        run()
    finally:
        startup.resume_collection()


__getattr__ = module_getattr(__name__, _HOMES, globals())


class _Package(types.ModuleType):
    """This package's module type: its attribute ``app`` is always the whole app, the import
    system's record of the submodule walctl.cli.app (which would shadow it) is ignored."""

    @property
    def app(self):
        from walctl.cli.app import app

        return app

    @app.setter
    def app(self, value) -> None:
        pass  # the import system setting the submodule; sys.modules["walctl.cli.app"] has it


sys.modules[__name__].__class__ = _Package

__all__ = ["Interrupted", "WalctlGroup", "app", "apply_conventions", "boundary", "env_name", "interrupted_error",
           "main", "normalise_args", "register", "usage_line"]
