"""What every command shares: its option types, its output helpers, and the mark that registers it.

Commands never import ``walctl.cli`` (docs/STYLE.md layers): the cli package imports them,
finds the functions marked with ``command(...)`` here, wraps each in the one error -> exit
boundary and adds it to the app. What the app knows of one run (``--debug``, the app itself,
for selftest) reaches a command through click's context (``debug_requested``, ``running_app``).
"""

from __future__ import annotations

import io
import json
import os
import sys
from threading import get_ident as _get_ident
from threading import main_thread as _main_thread
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable

import typer

from walctl.defaults import DEFAULT_S3_CONNECT_TIMEOUT_S, DEFAULT_S3_READ_TIMEOUT_S, DEFAULT_S3_RETRY_FOR_S

# Keys of click's ``Context.meta`` (shared by the whole run) the app's root callback fills.
DEBUG_KEY = "walctl.debug"
QUIET_KEY = "walctl.quiet"
APP_KEY = "walctl.app"


@dataclass(frozen=True)
class CommandSpec:
    """How the cli package registers a command function: its name, whether it streams NDJSON (its
    error object is then the closing summary line), and typer's ``app.command`` keywords."""

    name: str
    stream: bool = False
    options: dict[str, Any] = field(default_factory=dict)


def command(name: str, *, stream: bool = False, **options: Any) -> Callable:
    """Mark ``fn`` as the command ``name`` (several marks: several names, e.g. an alias).

    Only marks: walctl.cli's registration adds it to the app inside the error -> exit boundary.
    """

    def mark(fn: Callable) -> Callable:
        fn.walctl_commands = [*getattr(fn, "walctl_commands", []), CommandSpec(name, stream, options)]
        return fn

    return mark


def _current_context():
    try:  # typer >= 0.29 carries its own copy of click
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover
        from click import get_current_context
    return get_current_context(silent=True)


def debug_requested() -> bool:
    """``--debug`` (or WALCTL_DEBUG) was given to this run (False outside a CLI run)."""
    ctx = _current_context()
    return bool(ctx is not None and ctx.meta.get(DEBUG_KEY))


def quiet_requested() -> bool:
    """``--quiet``/``-q`` (or WALCTL_QUIET) was given to this run (False outside a CLI run): no progress,
    warnings or human summary lines on stderr; errors still print, stdout is unchanged."""
    ctx = _current_context()
    return bool(ctx is not None and ctx.meta.get(QUIET_KEY))


def running_app() -> Any:
    """The typer app this command runs in (selftest runs the other commands through it)."""
    ctx = _current_context()
    if ctx is None or ctx.meta.get(APP_KEY) is None:
        raise RuntimeError("not inside a walctl CLI run")
    return ctx.meta[APP_KEY]


# -- shared options (declared once, reused by every command) ---------------------------
# Every option also gets WALCTL_<OPTION> (shown in --help) and -j/-n/-s from the cli package's
# conventions: declare an option's envvar only to keep an older name working.
DeviceArg = Annotated[str, typer.Argument(
    metavar="DEVICE", envvar="WALCTL_DEVICE",
    help="WAL device: a block device (/dev/...) or a regular file.")]
JsonOpt = Annotated[bool, typer.Option(
    "--json", help="Machine output on stdout (NDJSON for record streams, ending with one summary line); "
         "also before the command name.")]
StreamOpt = Annotated[int | None, typer.Option(
    "--stream", min=0, help="Stream id (a non-negative integer).")]
StoreOpt = Annotated[str, typer.Option(
    "--store", metavar="URL",
    help="Object store: a local directory (the embedded default: a path or file:///path) or "
         "s3://bucket[/prefix].")]
EndpointOpt = Annotated[str | None, typer.Option(
    "--endpoint-url", envvar="AWS_ENDPOINT_URL", metavar="URL",
    help="S3 endpoint (MinIO, Ceph, R2, moto); credentials come from boto3's usual chain.")]
NamespaceOpt = Annotated[str, typer.Option(
    "--namespace", help="Namespace part of object keys (<rev-hex>/<namespace>/<id>).")]


def _duration(min_s: float, max_s: float) -> Callable[[Any], float]:
    """A duration option's parser: walctl.options.Duration, loaded only for a value other than whole
    seconds (the defaults are "30s" ...: a clean run of read does not load walctl.options)."""

    def parse(value: Any) -> float:
        seconds = int(value[:-1]) if isinstance(value, str) and value[-1:] == "s" and value[:-1].isdigit() else value
        if isinstance(seconds, (int, float)) and min_s <= seconds <= max_s:
            return float(seconds)
        from walctl.options import Duration

        return Duration(min=min_s, max=max_s)(value)

    parse.__name__ = "duration"
    return parse


# Every command with --store: how S3 rides out an outage or a silent endpoint (s3_settings() builds
# what open_store takes). walctl.defaults says why the defaults are what they are; a command's
# parameter takes its default from RETRY_FOR, S3_CONNECT_TIMEOUT and S3_READ_TIMEOUT.
RETRY_FOR, S3_CONNECT_TIMEOUT, S3_READ_TIMEOUT = (f"{DEFAULT_S3_RETRY_FOR_S:g}s", f"{DEFAULT_S3_CONNECT_TIMEOUT_S:g}s",
                                                  f"{DEFAULT_S3_READ_TIMEOUT_S:g}s")
RetryForOpt = Annotated[float, typer.Option(
    "--retry-for", metavar="DURATION", parser=_duration(0, 7 * 86400),
    help="S3: retry a failing request (connection refused, reset or closed, a timeout, 5xx, throttling) "
         "with backoff (50 ms doubling, at most 2 s) until this long after its first attempt, saying so on "
         "stderr, then exit 6 (500ms, 30s, 5m, up to 7d; 0: only botocore's 5 quick attempts). With the "
         "default timeouts a dead or silent endpoint fails within a minute.")]
S3ConnectTimeoutOpt = Annotated[float, typer.Option(
    "--s3-connect-timeout", metavar="DURATION", parser=_duration(0.001, 3600),
    help="S3: how long one attempt may take to connect (and to send each piece of a request body): "
         "500ms, 10s, 1m.")]
S3ReadTimeoutOpt = Annotated[float, typer.Option(
    "--s3-read-timeout", metavar="DURATION", parser=_duration(0.001, 3600),
    help="S3: how long one attempt may wait, silent, for the answer's next bytes before it fails and is "
         "retried (500ms, 15s, 2m); raise it for an endpoint slow to answer large copies.")]


def s3_settings(retry_for: float, connect_timeout: float, read_timeout: float):
    """What open_store takes from --retry-for, --s3-connect-timeout and --s3-read-timeout; its retry
    warnings go to stderr (``warn``)."""
    from walctl.store.base import S3Settings

    return S3Settings(retry_for_s=retry_for, connect_timeout_s=connect_timeout, read_timeout_s=read_timeout,
                      on_warning=warn)


# upload, compact and gc (walctl.metrics writes the file).
def metrics_path(value: Any) -> Any:
    """--metrics-file's parser: walctl.metrics.check_path while parsing (exit 2 before anything runs)."""
    from walctl.errors import UsageError
    from walctl.metrics import check_path
    from walctl.options import OptionError

    if isinstance(value, str):
        try:
            check_path(value)
        except UsageError as exc:
            raise OptionError(exc.what.removeprefix("--metrics-file ") + (f", {exc.where}" if exc.where else ""),
                              exc.hint) from None
    return value


metrics_path.__name__ = "path"
MetricsFileOpt = Annotated[str | None, typer.Option(
    "--metrics-file", metavar="PATH", parser=metrics_path,
    help="After the run, write Prometheus text-format metrics here for node_exporter's textfile "
         "collector (name it *.prom): success, last success and failure timestamps (seconds), bytes, "
         "objects, requests and seconds of the run and summed over runs. Replaced atomically; a failed "
         "run keeps the last success timestamp. Not written by --dry-run.")]


# -- output ---------------------------------------------------------------------------
def utc_now() -> str:
    """Now, ISO 8601 UTC to the millisecond (``2026-11-28T12:45:14.123Z``): the ``time`` of a JSON document."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def utc_iso(seconds: float | None) -> str | None:
    """Seconds since the epoch (a manifest's times) as ``time`` is written: ISO 8601 UTC to the millisecond."""
    from datetime import datetime, timezone

    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# Fields whose "none" the formats spell -1 (FORMATS.md 1.1: a never-trimmed WAL's trimOffset, an unset nodeId
# or epoch; a checkpoint with no upload; a verify state that has no next offset yet): null in JSON.
_MINUS_ONE_IS_NONE = frozenset({"trim_offset", "previous_trim_offset", "node_id", "epoch", "uploaded_offset",
                                "next_offset"})


def json_nulls(obj):
    """``obj`` with docs/CLI.md's null rule applied: a field known as -1 for "none" (``trim_offset``
    of a never-trimmed WAL, ``node_id`` and ``epoch`` unset) is null, as every other absent value; nested objects too. The human
    output keeps its own words ("- (never trimmed)")."""
    if isinstance(obj, dict):
        return {k: (None if k in _MINUS_ONE_IS_NONE and isinstance(v, int) and v < 0 else json_nulls(v))
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [json_nulls(v) for v in obj]
    return obj


def emit_json(obj: dict) -> None:
    """One JSON object per line on stdout, flushed at once (callers may be cut off any moment); it
    carries ``time`` (when it was rendered, ISO 8601 UTC: cron's logs) unless it has its own."""
    obj = json_nulls(obj)
    if "time" not in obj:
        obj = {**obj, "time": utc_now()}
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def write_lines(text: str | bytes) -> None:
    """Write whole lines to stdout at the file descriptor, so that a SIGTERM or SIGINT arriving in
    the middle (while a slow pipe reader holds the write up) never leaves a line cut short: each
    write of at most a pipe's capacity completes and is counted before the interruption is raised
    (walctl.device.signals.signals_deferred), the rest of the line being written goes out, then
    the interruption propagates and the summary printed on the way out starts on a line of its
    own. (Through sys.stdout an interrupted write loses what its text buffer held: a torn NDJSON
    line with the summary glued to it.) Any thread may call it (append's acknowledgements come
    from two): all of them write at the descriptor, so none can take another's text out of
    sys.stdout's buffer. What was written the usual way is flushed first, to keep the order.
    Off the main thread (append's reaper) nothing is deferred: Python raises signals in the main
    thread only, and an interrupted write(2) is resumed, so the text goes out in one loop (issue 31:
    a tenth of the deferred path's cost, once per durable block)."""
    stdout = sys.stdout
    try:
        fd = stdout.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):  # not a file (a test's capture): its own write
        stdout.write(text if isinstance(text, str) else text.decode())
        stdout.flush()
        return
    if _get_ident() != _main_thread().ident:
        # (No import in this path, no memoryview for a write that goes out whole: it runs once per
        # durable block; issue 31.)
        stdout.flush()
        data = text.encode() if isinstance(text, str) else text
        done = os.write(fd, data)
        if done < len(data):
            view = memoryview(data)[done:]
            while view:
                view = view[os.write(fd, view):]
        return
    from walctl.device.signals import signals_deferred

    with signals_deferred():  # (an interrupted flush loses what sys.stdout held)
        sys.stdout.flush()
    data = text.encode() if isinstance(text, str) else text  # (bytes: lines rendered in C, written as they are)
    view = memoryview(data)
    done = 0
    try:
        while done < len(data):
            with signals_deferred():
                done += os.write(fd, view[done:done + _WRITE_PIECE])
    except KeyboardInterrupt:
        if 0 < done < len(data) and data[done - 1] != 0x0A:  # a line begun: end it
            end = data.index(b"\n", done) + 1
            while done < end:
                done += os.write(fd, view[done:end])
        raise


_WRITE_PIECE = 64 << 10  # a pipe's default capacity


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

    def __init__(self, total: int | None, description: str, *, json_out: bool = False, streaming: bool = False,
                 lazy: bool = False):
        """``streaming``: the command prints its data to stdout as it goes; the bar is then shown
        only when stdout is not the same terminal (data never passes through the bar's console).
        ``lazy``: the bar appears at the first ``update`` (an engine that may do no long work)."""
        self.bar = None
        self.lazy = lazy
        self.started = False
        if (not json_out and sys.stderr.isatty() and not (streaming and sys.stdout.isatty())
                and not quiet_requested()):
            from rich.progress import Progress

            self.bar = Progress(*progress_columns(description), console=stderr_console(), transient=True,
                                redirect_stdout=False, redirect_stderr=False)
            self.task = self.bar.add_task(description, total=total)

    def __enter__(self):
        if self.bar is None:
            return None
        if not self.lazy:
            self.bar.start()
            self.started = True
        return self.update

    def update(self, done: int, total: int | None = None) -> None:
        if not self.started:
            self.bar.start()
            self.started = True
        if total is not None:
            self.bar.update(self.task, completed=done, total=total)
        else:
            self.bar.update(self.task, completed=done)

    def __exit__(self, *exc) -> None:
        if self.started:
            self.bar.stop()


def progress_columns(description: str) -> tuple:
    """A progress bar's columns: what it is, the bar, bytes done of the total and the rate, both in
    binary units (``3.0/16.0 MiB``, ``1.5 MiB/s``: docs/CLI.md's number rules), never MiB beside MB/s."""
    from rich.progress import BarColumn, DownloadColumn, ProgressColumn, TextColumn
    from rich.text import Text

    class BinarySpeedColumn(ProgressColumn):
        def render(self, task) -> Text:
            speed = task.finished_speed or task.speed
            if speed is None:
                return Text("?", style="progress.data.speed")
            from walctl.human import rate

            return Text(rate(speed), style="progress.data.speed")

    return TextColumn(description), BarColumn(), DownloadColumn(binary_units=True), BinarySpeedColumn()


def silence_stdout() -> None:
    """Point stdout at /dev/null once its reader is gone, so nothing else fails writing to it."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


class StatusLine:
    """One line of stderr rewritten in place (a terminal's live progress), cleared at the end."""

    def __init__(self):
        self.shown = False

    def show(self, text: str) -> None:
        sys.stderr.write("\r\033[K" + text)
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.shown = False


def warn(message: str) -> None:
    """``walctl: warning: ...`` on stderr; nothing with --quiet."""
    if quiet_requested():
        return
    typer.echo(f"walctl: warning: {message}", err=True)
