"""The walctl app: its root options, and the registration of every command (the only module
that imports walctl.commands' command modules).

A command module is imported when typer first looks at the app's commands, not when this
module is imported: ``walctl read ...`` imports walctl.commands.read and nothing of the other
commands (``main`` builds an app of the one module the command line names), while ``app``, the
whole app the tests, the man pages and ``walctl --help`` see, imports them all on first use.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated, Iterable

import typer

from walctl import __version__
from walctl.cli.boundary import WalctlGroup, boundary
from walctl.commands._shared import APP_KEY, DEBUG_KEY, QUIET_KEY

# Every command name and the module that defines it (tests/cli/test_startup.py checks it against
# what the modules register). A name missing here still works: its run imports every module.
COMMAND_MODULE_OF = {"append": "append", "init": "init", "recover": "recover", "trim": "trim", "upload": "upload",
                     "inspect-object": "inspect_object", "ls": "ls", "objects": "ls", "gc": "gc",
                     "check": "check", "compact": "compact", "status": "status", "image": "image", "bench": "bench",
                     "read": "read", "salvage": "salvage"}
# selftest runs the other commands through the app it runs in: it gets all of them.

# Root options that end the run before any command is looked at (eager); the help lists commands.
_VERSION_OPTIONS = ("--version", "-V")
_HELP_OPTIONS = ("--help", "-h")


def _import_command_modules(names: Iterable[str] | None = None) -> list:
    """The modules walctl.commands.<name> of ``names``; default: every command module, in the
    order --help and the man pages list the commands."""
    if names is None:
        from walctl.commands import (append, bench, check, compact, gc, image, init, inspect_object, ls, read,
                                     recover, salvage, selftest, status, trim, upload)
        return [append, init, recover, trim, upload, salvage, inspect_object, ls, gc, check, compact, status,
                selftest, image, bench, read]
    return [importlib.import_module(f"walctl.commands.{name}") for name in names]


def register(target: typer.Typer, modules=None) -> None:
    """Add every function the modules (default: all of walctl's) mark with
    ``walctl.commands._shared.command`` to ``target``, each inside the error -> exit boundary."""
    for module in _import_command_modules() if modules is None else modules:
        for fn in list(vars(module).values()):
            if getattr(fn, "__module__", None) != module.__name__:
                continue  # imported from elsewhere: registered by its own module
            for spec in getattr(fn, "walctl_commands", ()):
                target.command(spec.name, **spec.options)(boundary(fn, stream=spec.stream))


class _App(typer.Typer):
    """A typer app whose command modules are imported and registered the first time typer (or
    anything else) looks at its commands."""

    def __init__(self, module_names: tuple[str, ...] | None, **kwargs):
        self._module_names = module_names  # None: every command module
        self._registered = False
        super().__init__(**kwargs)

    @property
    def registered_commands(self) -> list:
        if not self._registered:
            self._registered = True
            register(self, _import_command_modules(self._module_names))
        return self._commands

    @registered_commands.setter
    def registered_commands(self, value: list) -> None:
        self._commands = value


def _new_app(module_names: tuple[str, ...] | None) -> typer.Typer:
    new = _App(
        module_names,
        cls=WalctlGroup,
        name="walctl",
        help="Operate a ring-buffer write-ahead log on a raw block device (or a file), "
             "and the objects its data becomes in object storage (AutoMQ S3Stream design).",
        no_args_is_help=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    )

    @new.callback()
    def _root(
        ctx: typer.Context,
        debug: Annotated[bool, typer.Option("--debug",
                                            help="On an internal error (exit 1), print the traceback. Also after the command name.")] = False,
        quiet: Annotated[bool, typer.Option("--quiet", "-q",
                                            help="Print nothing on stderr but errors: no progress bar, warning or "
                                                 "summary line (stdout's data and tables are unchanged). Also after "
                                                 "the command name.")] = False,
        version: Annotated[bool, typer.Option("--version", "-V", callback=_version, is_eager=True,
                                              help="Print the version and exit.")] = False,
    ) -> None:
        # What a command may ask of this run (walctl.commands._shared.debug_requested, running_app).
        ctx.meta[DEBUG_KEY] = debug
        ctx.meta[QUIET_KEY] = quiet
        ctx.meta[APP_KEY] = new

    return new


def _version(value: bool) -> None:
    if value:
        typer.echo(f"walctl {__version__}")
        raise typer.Exit()


def modules_for(args: list[str]) -> tuple[str, ...] | None:
    """The command modules a run with these arguments needs: the named command's; none for
    ``--version``; every one (None) for --help, no command, an unknown command and selftest."""
    for token in args:
        if token in COMMAND_MODULE_OF:
            return (COMMAND_MODULE_OF[token],)
        if token in _VERSION_OPTIONS:
            return ()
        if token in _HELP_OPTIONS or not token.startswith("-") or token == "--":
            break  # root options take no value: any other word is the command
    return None


# The whole app: every command (imported on first use).
app = _new_app(None)


def main() -> None:
    """Console-script entry point."""
    if os.environ.get("_WALCTL_COMPLETE"):  # shell completion: every command name
        app()
    else:
        _new_app(modules_for(sys.argv[1:]))()
