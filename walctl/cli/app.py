"""The walctl app: its root options, and the registration of every command (the only module
that imports walctl.commands' command modules)."""

from __future__ import annotations

from typing import Annotated

import typer

from walctl import __version__
from walctl.cli.boundary import WalctlGroup, boundary
from walctl.commands import (append, bench, compact, gc, image, init, inspect_object, ls, read, recover, selftest,
                             status, trim, upload)
from walctl.commands._shared import APP_KEY, DEBUG_KEY

app = typer.Typer(
    cls=WalctlGroup,
    name="walctl",
    help="Operate a ring-buffer write-ahead log on a raw block device (or a file), "
         "and the objects its data becomes in object storage (AutoMQ S3Stream design).",
    no_args_is_help=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"walctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option("--debug", envvar="WALCTL_DEBUG",
                                        help="On an internal error (exit 1), print the traceback. Also after the command name.")] = False,
    version: Annotated[bool, typer.Option("--version", "-V", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    # What a command may ask of this run (walctl.commands._shared.debug_requested, running_app).
    ctx.meta[DEBUG_KEY] = debug
    ctx.meta[APP_KEY] = app


# The commands in the order --help and the man pages list them.
COMMAND_MODULES = (append, init, recover, trim, upload, inspect_object, ls, gc, compact, status, selftest, image,
                   bench, read)


def register(target: typer.Typer, modules=COMMAND_MODULES) -> None:
    """Add every function the modules mark with ``walctl.commands._shared.command`` to ``target``,
    each inside the error -> exit boundary."""
    for module in modules:
        for fn in list(vars(module).values()):
            if getattr(fn, "__module__", None) != module.__name__:
                continue  # imported from elsewhere: registered by its own module
            for spec in getattr(fn, "walctl_commands", ()):
                target.command(spec.name, **spec.options)(boundary(fn, stream=spec.stream))


register(app)


def main() -> None:
    """Console-script entry point."""
    app()
