"""The walctl app: shared option types, output helpers, and the one place errors become exit codes."""

from __future__ import annotations

import functools
import json
import sys
import traceback
from typing import Annotated, Any, Callable

import typer
from typer.core import TyperGroup

try:  # typer >= 0.29 carries its own copy of click and raises that copy's exceptions
    from typer import _click as click
    from typer._click.exceptions import UsageError as ClickUsageError
except ImportError:  # pragma: no cover - older typer uses the click package
    import click
    from click.exceptions import UsageError as ClickUsageError

from walctl import __version__
from walctl.errors import WalctlError

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE = 0, 1, 2
EXIT_BROKEN_PIPE = 141  # what a shell reports for a process killed by SIGPIPE (128 + 13)

_state = {"debug": False}


class WalctlGroup(TyperGroup):
    """Turns click's usage errors into the one-line ``walctl: error: ...`` form, exit 2."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args=args, prog_name=prog_name or "walctl", complete_var=complete_var,
                              standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else EXIT_OK
        except ClickUsageError as exc:
            where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"walctl: error: {exc.format_message()}{where}", err=True)
            code = EXIT_USAGE
        except typer.Abort:
            click.echo("walctl: error: aborted", err=True)
            code = 130
        except typer.Exit as exc:
            code = exc.exit_code
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    cls=WalctlGroup,
    name="walctl",
    help="Operate a ring-buffer write-ahead log on a raw block device (or a file), "
         "and the objects its data becomes in object storage (AutoMQ S3Stream design).",
    no_args_is_help=True,
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
    debug: Annotated[bool, typer.Option("--debug", envvar="WALCTL_DEBUG",
                                        help="On an internal error (exit 1), print the traceback.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    _state["debug"] = debug


# -- shared options (declared once, reused by every command) ---------------------------
DeviceArg = Annotated[str, typer.Argument(
    metavar="DEVICE", envvar="WALCTL_DEVICE",
    help="WAL device: a block device (/dev/...) or a regular file. Env: WALCTL_DEVICE.")]
JsonOpt = Annotated[bool, typer.Option(
    "--json", envvar="WALCTL_JSON",
    help="Machine output on stdout (NDJSON for record streams, ending with one summary line).")]
StreamOpt = Annotated[int | None, typer.Option(
    "--stream", envvar="WALCTL_STREAM", min=0, help="Stream id (a non-negative integer).")]
StoreOpt = Annotated[str, typer.Option(
    "--store", envvar="WALCTL_STORE", metavar="URL",
    help="Object store: a local directory (the embedded default: a path or file:///path) or "
         "s3://bucket[/prefix]. Env: WALCTL_STORE.")]
EndpointOpt = Annotated[str | None, typer.Option(
    "--endpoint-url", envvar="AWS_ENDPOINT_URL", metavar="URL",
    help="S3 endpoint (MinIO, Ceph, R2, moto); credentials come from boto3's usual chain. "
         "Env: AWS_ENDPOINT_URL.")]
NamespaceOpt = Annotated[str, typer.Option(
    "--namespace", envvar="WALCTL_NAMESPACE", help="Namespace part of object keys (<rev-hex>/<namespace>/<id>).")]


# -- output ---------------------------------------------------------------------------
def emit_json(obj: dict) -> None:
    """One JSON object per line on stdout, flushed at once (callers may be cut off any moment)."""
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def stderr_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def stdout_console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def silence_stdout() -> None:
    """Point stdout at /dev/null once its reader is gone, so nothing else fails writing to it."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def warn(message: str) -> None:
    click.echo(f"walctl: warning: {message}", err=True)


def command(stream: bool = False) -> Callable:
    """Wrap a command body: WalctlError -> one stderr line + its exit code (+ JSON error object).

    Args:
        stream: the command prints NDJSON; its error object is the closing summary line.
    """

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            json_out = bool(kwargs.get("json_out"))
            try:
                return fn(*args, **kwargs)
            except (typer.Exit, typer.Abort, ClickUsageError):
                raise
            except WalctlError as exc:
                _report(exc.line(), exc.to_json(), exc.exit_code, json_out, stream, getattr(exc, "summary", None))
                raise typer.Exit(exc.exit_code) from None
            except KeyboardInterrupt:
                click.echo("walctl: error: interrupted", err=True)
                raise typer.Exit(130) from None
            except BrokenPipeError:
                silence_stdout()
                raise typer.Exit(EXIT_BROKEN_PIPE) from None  # stdout's reader went away
            except Exception as exc:  # a bug: the only case that may print a traceback
                if _state["debug"]:
                    traceback.print_exc()
                line = (f"walctl: error: internal error: {type(exc).__name__}: {exc} "
                        f"(a bug; rerun with --debug for the traceback)")
                _report(line, {"code": EXIT_INTERNAL, "message": line.removeprefix("walctl: error: ")},
                        EXIT_INTERNAL, json_out, stream, None)
                raise typer.Exit(EXIT_INTERNAL) from None

        return wrapper

    return decorate


def _report(line: str, error: dict, code: int, json_out: bool, stream: bool, summary: dict | None) -> None:
    click.echo(line, err=True)
    if json_out:
        obj = dict(summary or {})
        if stream:
            obj.setdefault("type", "summary")
        obj["error"] = error
        try:
            emit_json(obj)
        except BrokenPipeError:
            pass


def main() -> None:
    """Console-script entry point."""
    app()


# Register the commands (each module adds itself to ``app``).
from walctl.commands import append as _append  # noqa: E402,F401
from walctl.commands import init as _init  # noqa: E402,F401
from walctl.commands import recover as _recover  # noqa: E402,F401
from walctl.commands import trim as _trim  # noqa: E402,F401
from walctl.commands import upload as _upload  # noqa: E402,F401
from walctl.commands import inspect_object as _inspect_object  # noqa: E402,F401
from walctl.commands import ls as _ls  # noqa: E402,F401
from walctl.commands import gc as _gc  # noqa: E402,F401
from walctl.commands import compact as _compact  # noqa: E402,F401
from walctl.commands import status as _status  # noqa: E402,F401
from walctl.commands import selftest as _selftest  # noqa: E402,F401
from walctl.commands import image as _image  # noqa: E402,F401
from walctl.commands import bench as _bench  # noqa: E402,F401
from walctl.commands import read as _read  # noqa: E402,F401
