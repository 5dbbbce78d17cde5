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
import stat
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

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

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^}\"]|\"(?:[^\"\\]|\\.)*\")*\})?\s+(\S+)(\s+\S+)?\s*$")


def resolved_labels(labels: dict[str, object] | None) -> dict[str, object] | None:
    """``device`` and ``store`` labels of a local path as its absolute path: one WAL or store is one
    label set however it was typed (``store3`` from /srv/wal, ``/srv/wal/store3``); URLs kept."""
    if not labels:
        return labels
    out = dict(labels)
    for key in ("device", "store"):
        value = out.get(key)
        if isinstance(value, str) and value and "://" not in value:
            out[key] = os.path.abspath(value)
    return out


def labels_text(labels: dict[str, object] | None) -> str:
    """``{device="/dev/x",node_id="3"}``: sorted names, escaped values ('' for no labels).

    Labels tell two WALs (or stores) on one host apart: their samples share a file and a
    family, each with its own label set, and each run updates only its own samples.
    """
    if not labels:
        return ""
    parts = []
    for key in sorted(labels):
        text = str(labels[key]).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")
        parts.append(f'{key}="{text}"')
    return "{" + ",".join(parts) + "}"


@dataclass(frozen=True)
class Family:
    """One metric family of one run: its HELP and TYPE, and the run's sample (with its labels)."""

    name: str
    kind: str  # "counter" or "gauge"
    help: str
    value: float
    labels: str = ""

    def render(self) -> str:
        return f"# HELP {self.name} {_help(self.help)}\n# TYPE {self.name} {self.kind}\n{self.sample()}"

    def sample(self) -> str:
        return f"{self.name}{self.labels} {_number(self.value)}\n"


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53):
        return str(int(value))
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


@dataclass
class _Parsed:
    """A previous file: families in order, their HELP/TYPE, and samples by label set."""

    order: list[str] = field(default_factory=list)
    meta: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (help line, type line)
    samples: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> labels -> value text

    def add_name(self, name: str) -> None:
        if name not in self.samples:
            self.order.append(name)
            self.samples[name] = {}


def _parse(text: str) -> _Parsed:
    """Every HELP, TYPE and sample line that parses; comments and garbage are dropped."""
    parsed = _Parsed()
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            parts = line.split(None, 3)
            if len(parts) < 3:
                continue
            parsed.add_name(parts[2])
            help_line, type_line = parsed.meta.get(parts[2], ("", ""))
            parsed.meta[parts[2]] = (line, type_line) if parts[1] == "HELP" else (help_line, line)
            continue
        if not line.strip() or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        parsed.add_name(match.group(1))
        parsed.samples[match.group(1)][match.group(2) or ""] = match.group(3)
    return parsed


def parse_samples(text: str) -> dict[tuple[str, str], float]:
    """Sample values by (metric name, label text) (HELP/TYPE/comments and unparsable lines skipped)."""
    out: dict[tuple[str, str], float] = {}
    parsed = _parse(text)
    for name, by_labels in parsed.samples.items():
        for labels, raw in by_labels.items():
            try:
                out[(name, labels)] = float(raw)
            except ValueError:
                continue
    return out


def parse_values(text: str, labels: dict[str, object] | None = None) -> dict[str, float]:
    """Sample values by metric name: of the samples with exactly ``labels`` ({} for unlabelled), or
    with ``labels`` None of every sample (the last label set wins: for a file of one WAL or store)."""
    if labels is None:
        return {name: v for (name, _), v in parse_samples(text).items()}
    wanted = labels_text(labels)
    return {name: v for (name, lab), v in parse_samples(text).items() if lab == wanted}


def foreign_lines(text: str, job: str) -> list[str]:
    """The previous file's HELP, TYPE and sample lines of metrics that are not this job's."""
    own = f"{PREFIX}_{job}_"
    parsed = _parse(text)
    kept = []
    for name in parsed.order:
        if name.startswith(own):
            continue
        help_line, type_line = parsed.meta.get(name, ("", ""))
        kept += [x for x in (help_line, type_line) if x]
        kept += [f"{name}{lab} {raw}" for lab, raw in parsed.samples[name].items()]
    return kept


def job_families(job: str, previous: dict[str, float], *, success: bool, now: float, duration_s: float,
                 amounts: dict[str, float], labels: str = "") -> list[Family]:
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
    return [Family(f.name, f.kind, f.help, f.value, labels) for f in families]


def merge(previous_text: str, families: list[Family], drop: tuple[list[str], str] | None = None) -> str:
    """The previous file with ``families``' samples put in (each replacing the sample of the same
    name and labels; samples of other label sets and other families kept), one HELP and TYPE per family.
    ``drop``: (family names, labels text): those samples are removed (a gauge the run did not measure)."""
    parsed = _parse(previous_text)
    if drop is not None:
        names, lab = drop
        for name in names:
            parsed.samples.get(name, {}).pop(lab, None)
    for f in families:
        parsed.add_name(f.name)
        parsed.meta[f.name] = (f"# HELP {f.name} {_help(f.help)}", f"# TYPE {f.name} {f.kind}")
        parsed.samples[f.name][f.labels] = _number(f.value)
    out = []
    for name in parsed.order:
        if not parsed.samples[name]:
            continue  # HELP/TYPE of a family with no sample left
        help_line, type_line = parsed.meta.get(name, ("", ""))
        out += [x for x in (help_line, type_line) if x]
        out += [f"{name}{lab} {raw}" for lab, raw in parsed.samples[name].items()]
    return "\n".join(out) + ("\n" if out else "")


def render(job: str, previous_text: str, *, success: bool, now: float, duration_s: float,
           amounts: dict[str, float], labels: dict[str, object] | None = None) -> str:
    """The new file's text: every other sample kept as it was, then this run's samples put in."""
    lab = labels_text(labels)
    previous = parse_values(previous_text, labels or {})
    families = job_families(job, previous, success=success, now=now, duration_s=duration_s, amounts=amounts,
                            labels=lab)
    return merge(previous_text, families)


# ``walctl status --metrics-file``: the WAL's state as gauges, labelled by device and node id.
WAL_GAUGES: dict[str, str] = {
    "up": "1 if walctl status could read the WAL's header, else 0",
    "status_timestamp_seconds": "When walctl status last looked at the WAL (seconds since the epoch)",
    "ring_bytes": "Bytes of the WAL's record area (capacity minus the two header slots)",
    "used_bytes": "Ring bytes in use: end of log minus the trim point",
    "free_bytes": "Ring bytes free for appends (exit 7 when a record does not fit)",
    "used_percent": "Ring bytes in use, in percent of the ring: alert before 100 (exit 7, full)",
    "trim_lag_bytes": "Bytes written and not yet trimmed (uploaded records are trimmed): what upload has to catch up",
    "records": "Live records after the trim point",
    "last_shutdown_graceful": "1 if the last writer closed the WAL cleanly, 0 if it crashed or is still running",
    "corrupt_findings": "Findings a crash does not explain (see walctl recover): 0 on a healthy WAL; absent when "
                        "the run verified nothing (no --scan, no --verify-budget)",
    "verified_bytes": "Log bytes the last walctl status --verify-budget run verified",
    "verified_through_offset": "WAL offset up to which the last --verify-budget run verified the log",
    "verify_last_pass_timestamp_seconds": "When --verify-budget last finished a whole pass over the live log "
                                          "(absent until the first pass ends)",
}


def wal_families(out: dict | None, *, now: float, labels: dict[str, object]) -> list[Family]:
    """Gauges of one ``walctl status`` result (``out`` None: the WAL could not be read: up 0)."""
    lab = labels_text(labels)
    base = f"{PREFIX}_wal"
    if out is None:
        values: dict[str, float] = {"up": 0, "status_timestamp_seconds": now}
    else:
        values = {
            "up": 1, "status_timestamp_seconds": now, "ring_bytes": out["ring_bytes"],
            "used_bytes": out["used_bytes"], "free_bytes": out["free_bytes"], "used_percent": out["used_percent"],
            "trim_lag_bytes": out["used_bytes"], "records": out["records"],
            "last_shutdown_graceful": 1 if out["shutdown_type"] == "graceful" else 0,
            "corrupt_findings": out["corrupt_findings"],
        }
        values.update(_verification_values(out.get("verification")))
    # A value status does not know (records and findings of a WAL answered from its checkpoint,
    # without --scan) is left out rather than written as NaN, which no alert rule compares.
    return [Family(f"{base}_{name}", "gauge", WAL_GAUGES[name], v, lab)
            for name, v in values.items() if v is not None]


def _verification_values(verification: dict | None) -> dict[str, float]:
    """status --verify-budget's gauges: what this run verified, and the findings known in the live
    log (remembered across runs until their range is verified again or trimmed away)."""
    if verification is None:
        return {}
    return {"corrupt_findings": verification["corrupt_findings"],
            "verified_bytes": verification["verified_bytes"],
            "verified_through_offset": verification["verified_through_offset"],
            # absent until a first pass ends (0 would make an alert on its age fire at once)
            "verify_last_pass_timestamp_seconds": verification["last_pass_timestamp_ns"] / 1e9 or None}


def write_wal_status(path: str, out: dict | None, *, device: str, node_id: object, clock=time.time) -> None:
    """Put one WAL's gauges into the metrics file (other WALs' and jobs' samples kept); atomic.

    A gauge this run did not measure (findings without a scan or a verification) is removed for
    this WAL's labels rather than left at an earlier run's value: absent means not measured."""
    labels = resolved_labels({"device": device, "node_id": node_id})
    families = wal_families(out, now=clock(), labels=labels)
    measured = {f.name for f in families}
    stale = [f"{PREFIX}_wal_{name}" for name in WAL_GAUGES if f"{PREFIX}_wal_{name}" not in measured]
    write_atomic(path, merge(read_previous(path), families, drop=(stale, labels_text(labels))))


# The most of an existing metrics file walctl reads (to keep the other jobs' samples): a textfile
# of walctl's and node_exporter's samples is a few KiB; a larger one is not a metrics file.
MAX_METRICS_FILE_BYTES = 16 << 20


def check_path(path: str) -> None:
    """Refuse (exit 2), before the job runs, a metrics path that is empty, a directory, not a
    regular file (a device such as /dev/zero, a FIFO: never read, never replaced), larger than
    MAX_METRICS_FILE_BYTES, or in a directory that does not exist."""
    hint = "give a file path, e.g. /var/lib/node_exporter/textfile/walctl.prom"
    if not path:
        raise UsageError("--metrics-file is empty", hint=hint)
    directory = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise UsageError("--metrics-file names a directory", where=path, hint=hint)
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UsageError("--metrics-file is not a regular file (a device, a FIFO or a socket)", where=path,
                         hint=hint)
    if st is not None and st.st_size > MAX_METRICS_FILE_BYTES:
        raise UsageError(f"--metrics-file is larger than {MAX_METRICS_FILE_BYTES >> 20} MiB: not a metrics file",
                         where=path, hint=hint)
    if not os.path.isdir(directory):
        raise UsageError("the directory of --metrics-file does not exist", where=path,
                         hint="create it, or point at node_exporter's --collector.textfile.directory")


def read_previous(path: str) -> str:
    """The previous file's text ('' when there is none, it cannot be read or is not a regular
    file); at most MAX_METRICS_FILE_BYTES of it (a file grown past that since check_path: its
    start, whose whole lines are kept)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_METRICS_FILE_BYTES + 1)
    except OSError:
        return ""
    finally:
        os.close(fd)
    if len(data) > MAX_METRICS_FILE_BYTES:
        data = data[:data.rfind(b"\n", 0, MAX_METRICS_FILE_BYTES) + 1]
    return data.decode("utf-8", errors="replace")


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
    labels: dict[str, object] | None = None  # device, store, node_id: which WAL or store the run was about
    summary: dict | None = None  # the command's result object, carried by a write error (--json)
    clock: Callable[[], float] = time.time
    _started: float = 0.0

    def __post_init__(self) -> None:
        if self.job not in AMOUNTS:
            raise ValueError(f"unknown metrics job {self.job!r}")
        if self.path is not None:
            check_path(self.path)
        self.labels = resolved_labels(self.labels)

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
                      duration_s=time.monotonic() - self._started, amounts=self.amounts, labels=self.labels)
        if success:
            try:
                write_atomic(self.path, text)
            except IOFailure as failure:
                failure.hint = f"the {self.job} run itself succeeded"
                failure.summary = self.summary  # WalctlError.summary: the JSON line still carries the result
                raise
            return False
        try:
            write_atomic(self.path, text)
        except IOFailure as failure:
            if self.on_warning is not None:
                self.on_warning(failure.line().removeprefix("walctl: error: "))
        return False  # the job's own exception goes on
