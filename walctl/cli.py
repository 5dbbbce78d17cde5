"""The walctl app: shared option types, output helpers, and the one place errors become exit codes."""

from __future__ import annotations

import functools
import json
import os
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


# Short options operators expect, added to every command that has the long one (and not the short).
SHORT_OPTIONS = {"--json": "-j", "--limit": "-n", "--stream": "-s"}
# Options that are the same on both sides of the command name: ``walctl --json status`` and
# ``walctl status --debug`` work. The root owns --debug; commands own --json.
ROOT_ANYWHERE = ("--debug",)
COMMAND_ANYWHERE = ("--json", "-j")
# typer's own shell-completion options take no environment variable.
NO_ENV = {"help", "install_completion", "show_completion", "version"}
# Variables an option kept from before the WALCTL_<OPTION> rule (still honoured, after the new name).
LEGACY_ENV = {"engine": ("WALCTL_IO_ENGINE",), "endpoint_url": ("AWS_ENDPOINT_URL",)}


def env_name(param) -> str:
    """``WALCTL_<OPTION>``: the option's long name, upper case, dashes as underscores."""
    longs = [o for o in getattr(param, "opts", []) if o.startswith("--")]
    name = longs[0][2:] if longs else param.name
    return "WALCTL_" + name.upper().replace("-", "_")


def apply_conventions(command) -> None:
    """Give every option of ``command`` its WALCTL_<OPTION> variable (shown in --help) and the
    expected short options; idempotent. Runs on every command the app is built with, so an
    option added later follows the rules without any code of its own."""
    taken = {o for p in command.params for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}
    for param in command.params:
        if getattr(param, "param_type_name", "") != "option" or param.name in NO_ENV or param.hidden:
            continue
        wanted = (env_name(param), *LEGACY_ENV.get(param.name, ()))
        current = () if param.envvar is None else ((param.envvar,) if isinstance(param.envvar, str)
                                                   else tuple(param.envvar))
        envvars = tuple(dict.fromkeys((*wanted, *current)))
        param.envvar = envvars[0] if len(envvars) == 1 else list(envvars)
        param.show_envvar = True
        for long, short in SHORT_OPTIONS.items():
            if long in param.opts and short not in taken:
                param.opts.append(short)
                taken.add(short)


def normalise_args(args: list[str], group) -> list[str]:
    """Move --debug before the command name and --json after it, wherever the operator typed them."""
    names = set(group.commands)
    out_root, out_cmd, rest = [], [], list(args)
    i = 0
    while i < len(rest):  # the root part: until the command name
        token = rest[i]
        if token in names:
            break
        if token in COMMAND_ANYWHERE:
            out_cmd.append(token)
        else:
            out_root.append(token)  # root options take no value today
        i += 1
    if i >= len(rest):
        return out_root + out_cmd
    name, tail = rest[i], rest[i + 1:]
    kept = []
    for j, token in enumerate(tail):
        if token == "--":
            kept += tail[j:]
            break
        if token in ROOT_ANYWHERE:
            out_root.append(token)
        else:
            kept.append(token)
    return out_root + [name] + out_cmd + kept


class WalctlGroup(TyperGroup):
    """The app's click group: CLI conventions on every command, and click's usage errors in the
    one-line ``walctl: error: ...`` form, exit 2."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        apply_conventions(self)
        for sub in self.commands.values():
            apply_conventions(sub)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if args is None:
            args = sys.argv[1:]
        args = normalise_args(list(args), self)
        try:
            if not args and not os.environ.get(complete_var or "_WALCTL_COMPLETE"):
                raise _NoCommand()
            rv = super().main(args=args, prog_name=prog_name or "walctl", complete_var=complete_var,
                              standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else EXIT_OK
        except _NoCommand:
            # Bare `walctl`: the usage on stdout for the person, one error line for the rule.
            with self.make_context("walctl", ["--help"], resilient_parsing=True) as ctx:
                click.echo(self.get_help(ctx))
            click.echo("walctl: error: no command given (see 'walctl --help'; "
                       "'walctl COMMAND --help' for one command)", err=True)
            code = EXIT_USAGE
        except ClickUsageError as exc:
            line = usage_line(exc)
            _report(line, {"code": EXIT_USAGE, "message": line.removeprefix("walctl: error: ")}, EXIT_USAGE,
                    _json_requested(args), _is_stream(exc), None)
            code = EXIT_USAGE
        except typer.Abort:
            click.echo("walctl: error: aborted (interrupted at a prompt)", err=True)
            code = 130
        except typer.Exit as exc:
            code = exc.exit_code
        if standalone_mode:
            sys.exit(code)
        return code


class _NoCommand(Exception):
    pass


def _json_requested(args: list[str]) -> bool:
    """--json on the command line (or WALCTL_JSON): a usage error still ends with a JSON object."""
    cut = args.index("--") if "--" in args else len(args)
    if any(a in COMMAND_ANYWHERE for a in args[:cut]):
        return True
    return os.environ.get("WALCTL_JSON", "").strip().lower() in ("1", "true", "yes", "on", "y", "t")


def _is_stream(exc) -> bool:
    ctx = getattr(exc, "ctx", None)
    callback = getattr(getattr(ctx, "command", None), "callback", None)
    return bool(getattr(callback, "walctl_stream", False))


def usage_line(exc) -> str:
    """One line for a click usage error: ``walctl: error: <what>, <option> (<hint>; see --help)``."""
    see = f"see '{exc.ctx.command_path} --help'" if getattr(exc, "ctx", None) is not None else "see 'walctl --help'"
    hint = getattr(exc, "hint", None)
    param = getattr(exc, "param", None)
    if hint is not None and param is not None:
        opts = [o for o in getattr(param, "opts", []) if o.startswith("--")] or [param.name]
        what = f"invalid value for {opts[0]}: {exc.message}"
        return f"walctl: error: {what} ({hint}; {see})"
    text = " ".join(exc.format_message().split())  # never more than one line
    return f"walctl: error: {text} ({see})"


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
    debug: Annotated[bool, typer.Option("--debug", envvar="WALCTL_DEBUG",
                                        help="On an internal error (exit 1), print the traceback. Also after the command name.")] = False,
    version: Annotated[bool, typer.Option("--version", "-V", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    _state["debug"] = debug


# -- shared options (declared once, reused by every command) ---------------------------
DeviceArg = Annotated[str, typer.Argument(
    metavar="DEVICE", envvar="WALCTL_DEVICE",
    help="WAL device: a block device (/dev/...) or a regular file.")]
JsonOpt = Annotated[bool, typer.Option(
    "--json", envvar="WALCTL_JSON",
    help="Machine output on stdout (NDJSON for record streams, ending with one summary line); "
         "also before the command name.")]
StreamOpt = Annotated[int | None, typer.Option(
    "--stream", envvar="WALCTL_STREAM", min=0, help="Stream id (a non-negative integer).")]
# Every option also gets WALCTL_<OPTION> (shown in --help) and -j/-n/-s from apply_conventions:
# declare an option's envvar only to keep an older name working.
StoreOpt = Annotated[str, typer.Option(
    "--store", envvar="WALCTL_STORE", metavar="URL",
    help="Object store: a local directory (the embedded default: a path or file:///path) or "
         "s3://bucket[/prefix].")]
EndpointOpt = Annotated[str | None, typer.Option(
    "--endpoint-url", envvar="AWS_ENDPOINT_URL", metavar="URL",
    help="S3 endpoint (MinIO, Ceph, R2, moto); credentials come from boto3's usual chain.")]
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


# Width of stdout when it is not a terminal: wide enough that no table or line ever wraps, so
# `grep` and `awk` see one line per row.
PIPE_WIDTH = 10_000


def stdout_console():
    """Human output on stdout: rich tables fitted to a terminal; never wrapped when piped."""
    from rich.console import Console

    if sys.stdout.isatty():
        return Console(highlight=False, soft_wrap=True)
    return Console(highlight=False, soft_wrap=True, width=PIPE_WIDTH)


class progress_bar:
    """A rich progress bar on stderr for long work: shown only when stderr is a terminal, never with
    --json. ``with progress_bar(total, "copying", json_out=...) as update:`` gives a callable
    ``update(done)`` (bytes done so far), or None when no bar is shown, so engines take it as
    their optional ``progress`` callback. ``total`` None: the bar pulses (size unknown)."""

    def __init__(self, total: int | None, description: str, *, json_out: bool = False, streaming: bool = False):
        """``streaming``: the command prints its data to stdout as it goes; the bar is then shown
        only when stdout is not the same terminal (data never passes through the bar's console)."""
        self.bar = None
        if not json_out and sys.stderr.isatty() and not (streaming and sys.stdout.isatty()):
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

            self.bar = Progress(TextColumn(description), BarColumn(), DownloadColumn(binary_units=True),
                                TransferSpeedColumn(), console=stderr_console(), transient=True,
                                redirect_stdout=False, redirect_stderr=False)
            self.task = self.bar.add_task(description, total=total)

    def __enter__(self):
        if self.bar is None:
            return None
        self.bar.start()
        return self.update

    def update(self, done: int, total: int | None = None) -> None:
        if total is not None:
            self.bar.update(self.task, completed=done, total=total)
        else:
            self.bar.update(self.task, completed=done)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


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


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT arrived: raised where the command was, so every ``finally`` and
    rollback on the way out runs (a KeyboardInterrupt, so code that handles Ctrl-C handles it)."""

    def __init__(self, signum: int):
        import signal

        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # what a shell reports: 130 for SIGINT, 143 for SIGTERM


class signals_interrupt:
    """While active, SIGTERM and SIGINT raise ``Interrupted`` in the main thread, once: a second
    signal while the command winds down is ignored (SIGKILL still ends it). Used by every
    command through ``command()``; the previous handlers come back on exit."""

    SIGNALS = ("SIGTERM", "SIGINT")

    def __init__(self):
        self.previous: dict = {}
        self.received: int | None = None

    def _handler(self, signum, frame):
        if self.received is not None:
            return
        self.received = signum
        raise Interrupted(signum)

    def __enter__(self):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                num = getattr(signal, name)
                self.previous[num] = signal.signal(num, self._handler)
        return self

    def __exit__(self, *exc):
        import signal

        for num, handler in self.previous.items():
            signal.signal(num, handler)
        return False


def interrupted_error(exc: BaseException) -> tuple[str, dict, int]:
    """The stderr line, JSON error object and exit code of an interruption (SIGINT when unknown)."""
    import signal

    signum = getattr(exc, "signum", signal.SIGINT)
    name = signal.Signals(signum).name
    line = (f"walctl: error: interrupted by {name} (the step in progress was finished or rolled back; "
            f"rerun the command to continue)")
    return line, {"code": 128 + signum, "message": line.removeprefix("walctl: error: "), "signal": name}, 128 + signum


def command(stream: bool = False) -> Callable:
    """Wrap a command body: WalctlError -> one stderr line + its exit code (+ JSON error object);
    SIGTERM/SIGINT -> the same, exit 143/130, after the body's own cleanup ran.

    Args:
        stream: the command prints NDJSON; its error object is the closing summary line.
    """

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            json_out = bool(kwargs.get("json_out"))
            try:
                with signals_interrupt():
                    return fn(*args, **kwargs)
            except (typer.Exit, typer.Abort, ClickUsageError):
                raise
            except WalctlError as exc:
                _report(exc.line(), exc.to_json(), exc.exit_code, json_out, stream, getattr(exc, "summary", None))
                raise typer.Exit(exc.exit_code) from None
            except KeyboardInterrupt as exc:
                line, error, code = interrupted_error(exc)
                _report(line, error, code, json_out, stream, getattr(exc, "summary", None))
                raise typer.Exit(code) from None
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

        wrapper.walctl_stream = stream
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
