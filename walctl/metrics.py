"""Prometheus text-format metrics files for cron jobs (node_exporter's textfile collector).

``upload``, ``compact`` and ``gc`` take ``--metrics-file PATH``. After each run the file
holds, for that job (``walctl_<job>_...``):

- gauges of the last run: ``_success`` (1 or 0), ``_last_run_timestamp_seconds``,
  ``_last_success_timestamp_seconds``, ``_last_failure_timestamp_seconds``,
  ``_last_run_duration_seconds`` and ``_last_run_<amount>`` (bytes, objects, ...);
- counters summed over every run written to the file: ``_runs_total``,
  ``_failures_total``, ``_seconds_total`` and ``_<amount>_total``.

A run carries over from the previous file what it does not set itself: the counters it
adds to, the last success timestamp when it failed (and the last failure timestamp when
it succeeded), and the lines of other jobs, so several jobs may share one file (though
one file per job avoids two jobs rewriting the same file at once). A never-seen
timestamp is written as 0, so an alert on ``time() - ..._last_success_timestamp_seconds``
fires for a job that never succeeded.

The file is replaced atomically: a temporary file in the same directory, fsync, rename,
fsync of the directory; node_exporter only reads names ending in ``.prom``, and the
temporary name does not.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from typing import Annotated, Callable

import typer

from walctl.errors import IOFailure, UsageError

PREFIX = "walctl"

# The amounts each job reports: name -> the start of its HELP text.
# Counters are ``walctl_<job>_<name>_total``; last-run gauges ``walctl_<job>_last_run_<name>``.
AMOUNTS: dict[str, dict[str, str]] = {
    "upload": {
        "bytes": "Bytes of objects uploaded to the store",
        "payload_bytes": "Payload bytes of the WAL records uploaded",
        "objects": "Objects uploaded and committed",
        "records": "WAL records uploaded",
        "requests": "Object store requests made (S3: every HTTP attempt, retries included)",
    },
    "compact": {
        "bytes": "Bytes of compacted objects written to the store",
        "read_bytes": "Bytes of source objects read by the compaction tasks",
        "objects": "Compacted objects written and committed",
        "input_objects": "Stream Set Objects compacted (replaced)",
        "requests": "Object store requests made by the driver and the Spark tasks",
    },
    "gc": {
        "objects": "Objects deleted from the store",
        "manifests": "Old manifests deleted",
        "requests": "Object store requests made",
    },
}

# The option upload, compact and gc share (declared once, like the shared options in walctl.cli).
MetricsFileOpt = Annotated[str | None, typer.Option(
    "--metrics-file", metavar="PATH",
    help="After the run, write Prometheus text-format metrics here for node_exporter's textfile "
         "collector (name it *.prom): success, last success and failure timestamps (seconds), bytes, "
         "objects, requests and seconds of the run and summed over runs. Replaced atomically; a failed "
         "run keeps the last success timestamp. Not written by --dry-run.")]

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(\s+\S+)?\s*$")


@dataclass(frozen=True)
class Family:
    """One metric family: a single unlabelled sample with its HELP and TYPE lines."""

    name: str
    kind: str  # "counter" or "gauge"
    help: str
    value: float

    def render(self) -> str:
        help_text = self.help.replace("\\", "\\\\").replace("\n", "\\n")
        return f"# HELP {self.name} {help_text}\n# TYPE {self.name} {self.kind}\n{self.name} {_number(self.value)}\n"


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53):
        return str(int(value))
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def parse_values(text: str) -> dict[str, float]:
    """Unlabelled sample values by metric name (HELP/TYPE/comments and unparsable lines skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None or match.group(2):
            continue
        try:
            out[match.group(1)] = float(match.group(3))
        except ValueError:
            continue
    return out


def _metric_name_of(line: str) -> str | None:
    if line.startswith("# HELP ") or line.startswith("# TYPE "):
        parts = line.split(None, 3)
        return parts[2] if len(parts) > 2 else None
    if line.startswith("#") or not line.strip():
        return None
    match = _SAMPLE.match(line)
    return match.group(1) if match else None


def foreign_lines(text: str, job: str) -> list[str]:
    """The previous file's HELP, TYPE and sample lines of metrics that are not this job's."""
    own = f"{PREFIX}_{job}_"
    kept = []
    for line in text.splitlines():
        name = _metric_name_of(line)
        if name is not None and not name.startswith(own):
            kept.append(line)
    return kept


def job_families(job: str, previous: dict[str, float], *, success: bool, now: float, duration_s: float,
                 amounts: dict[str, float]) -> list[Family]:
    """The families of one run of ``job``, counters continued from ``previous`` values."""
    if job not in AMOUNTS:
        raise ValueError(f"unknown metrics job {job!r}")
    base = f"{PREFIX}_{job}"

    def prev(name: str) -> float:
        value = previous.get(name, 0.0)
        return value if math.isfinite(value) and value >= 0 else 0.0

    families = [
        Family(f"{base}_success", "gauge", f"1 if the last walctl {job} run succeeded, else 0", 1 if success else 0),
        Family(f"{base}_last_run_timestamp_seconds", "gauge",
               f"When the last walctl {job} run ended (seconds since the epoch)", now),
        Family(f"{base}_last_success_timestamp_seconds", "gauge",
               f"When the last successful walctl {job} run ended (seconds since the epoch; 0: never)",
               now if success else prev(f"{base}_last_success_timestamp_seconds")),
        Family(f"{base}_last_failure_timestamp_seconds", "gauge",
               f"When the last failed walctl {job} run ended (seconds since the epoch; 0: never)",
               prev(f"{base}_last_failure_timestamp_seconds") if success else now),
        Family(f"{base}_last_run_duration_seconds", "gauge", f"Wall-clock seconds the last walctl {job} run took",
               round(duration_s, 6)),
        Family(f"{base}_runs_total", "counter", f"walctl {job} runs written to this file",
               prev(f"{base}_runs_total") + 1),
        Family(f"{base}_failures_total", "counter", f"Failed walctl {job} runs written to this file",
               prev(f"{base}_failures_total") + (0 if success else 1)),
        Family(f"{base}_seconds_total", "counter", f"Wall-clock seconds of every walctl {job} run",
               round(prev(f"{base}_seconds_total") + duration_s, 6)),
    ]
    for name, help_text in AMOUNTS[job].items():
        value = amounts.get(name, 0) if success else 0
        families.append(Family(f"{base}_last_run_{name}", "gauge", f"{help_text} by the last run", value))
        families.append(Family(f"{base}_{name}_total", "counter", f"{help_text}, summed over every run",
                               prev(f"{base}_{name}_total") + value))
    return families


def render(job: str, previous_text: str, *, success: bool, now: float, duration_s: float,
           amounts: dict[str, float]) -> str:
    """The new file's text: other jobs' lines kept as they were, then this job's families."""
    kept = foreign_lines(previous_text, job)
    families = job_families(job, parse_values(previous_text), success=success, now=now, duration_s=duration_s,
                            amounts=amounts)
    text = "\n".join(kept) + ("\n" if kept else "")
    return text + "".join(f.render() for f in families)


def check_path(path: str) -> None:
    """Refuse (exit 2) a metrics path whose directory is missing, before the job runs."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise UsageError("--metrics-file names a directory", where=path, hint="give a file path, e.g. walctl.prom")
    if not os.path.isdir(directory):
        raise UsageError("the directory of --metrics-file does not exist", where=path,
                         hint="create it, or point at node_exporter's --collector.textfile.directory")


def read_previous(path: str) -> str:
    """The previous file's text ('' when there is none or it cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def write_atomic(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` so a reader sees the old file or the new one, never a part.

    Raises:
        IOFailure: the directory is not writable, or a write, fsync or rename failed.
    """
    directory = os.path.dirname(os.path.abspath(path))
    name = os.path.basename(path)
    tmp = None
    try:
        # Not ending in .prom, so the textfile collector never reads the half-written file.
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
        try:
            os.fchmod(fd, 0o644)  # node_exporter usually runs as another user
            data = text.encode("utf-8")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)  # the content is durable before the name points at it
        finally:
            os.close(fd)
        os.replace(tmp, path)
        tmp = None
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)  # the rename itself survives a crash
        finally:
            os.close(dfd)
    except OSError as exc:
        raise IOFailure(f"cannot write the metrics file: {exc.strerror or exc}", where=path) from exc
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


@dataclass
class MetricsRun:
    """Times one run of ``job`` and writes its metrics file as the run ends (if ``path``).

    Use as a context manager around the job; call ``record(**amounts)`` once the job's
    figures are known, and set ``summary`` to the command's result object. Leaving the
    block normally writes a success; leaving it with an exception writes a failure
    (keeping the last success timestamp) and lets the exception through. ``enabled``
    False (a dry run) writes nothing.

    Raises (on a successful run only): IOFailure when the file cannot be written; a failure
    to write after a failed run is passed to ``on_warning`` so the job's own error stands.
    """

    path: str | None
    job: str
    enabled: bool = True
    on_warning: Callable[[str], None] | None = None
    amounts: dict[str, float] = field(default_factory=dict)
    summary: dict | None = None  # the command's result object, carried by a write error (--json)
    clock: Callable[[], float] = time.time
    _started: float = 0.0

    def __post_init__(self) -> None:
        if self.job not in AMOUNTS:
            raise ValueError(f"unknown metrics job {self.job!r}")
        if self.path is not None:
            check_path(self.path)

    @property
    def active(self) -> bool:
        return self.path is not None and self.enabled

    def record(self, **amounts: float) -> None:
        unknown = set(amounts) - set(AMOUNTS[self.job])
        if unknown:
            raise ValueError(f"unknown amounts for {self.job}: {sorted(unknown)}")
        self.amounts.update(amounts)

    def __enter__(self) -> "MetricsRun":
        self._started = time.monotonic()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if not self.active:
            return False
        success = exc_type is None
        text = render(self.job, read_previous(self.path), success=success, now=self.clock(),
                      duration_s=time.monotonic() - self._started, amounts=self.amounts)
        if success:
            try:
                write_atomic(self.path, text)
            except IOFailure as failure:
                failure.hint = f"the {self.job} run itself succeeded"
                failure.summary = self.summary
                raise
            return False
        try:
            write_atomic(self.path, text)
        except IOFailure as failure:
            if self.on_warning is not None:
                self.on_warning(failure.line().removeprefix("walctl: error: "))
        return False  # the job's own exception goes on
