"""The selftest's steps, in order: each the walctl command line it runs (as the table shows it)
and the check of its answer against what the run wrote.

Each check is ``fn(run, check) -> detail``: it runs its command(s) through ``run`` (a
walctl.selftest.runner.Run), raises StepFailed on a wrong answer and keeps in ``run.state``
what a later step checks against. To add a step, add a row to STEPS.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from typing import Callable

from walctl.selftest.runner import (COMPACT_MASTER, FILE_CAPACITY, IO_FAILED, LOOP_BACKING_BYTES, PREREQ_MISSING,
                                    CHECK_FAILED, Check, Run, StepFailed, _tail, expect, expect_eq)
from walctl.errors import EXIT_IO, EXIT_NOT_FOUND


def _plural(count: int, word: str) -> str:
    """``1 record``, ``2 records`` (docs/CLI.md; walctl.human is a layer above selftest)."""
    return f"{count:,} {word if count == 1 else word + 's'}"


@dataclass(frozen=True)
class Step:
    """One row of the table: ``args(run)`` is the command line it runs (a list, shown with the
    temporary paths by their role) or a description (a str)."""

    name: str
    args: Callable[[Run], list[str] | str]
    check: Callable[[Run, Check], str]
    compact: bool = False  # the compaction step: skipped (and shown so) under --no-compact
    after_compact: bool = False  # only meaningful after compaction: left out under --no-compact

    def command(self, run: Run) -> str:
        args = self.args(run)
        return run.shown(*args) if isinstance(args, list) else args


def _merged(ranges) -> list[tuple[int, int, int]]:
    """(stream, start, end) ranges with contiguous ones of a stream joined (an index has one per block)."""
    out: list[list[int]] = []
    for sid, start, end in sorted(ranges):
        if out and out[-1][0] == sid and out[-1][2] == start:
            out[-1][2] = end
        else:
            out.append([sid, start, end])
    return [tuple(r) for r in out]


# -- init and status --------------------------------------------------------------------------

def init_args(run: Run) -> list[str]:
    return ["init", run.result.device, "--json"] + ([] if run.result.loop else ["--capacity", FILE_CAPACITY])


def init(run: Run, check: Check) -> str:
    out = run.ok(*init_args(run), check=check).one()
    header = out["header"]
    capacity = LOOP_BACKING_BYTES if run.result.loop else 4 << 20
    expect_eq(header["capacity_bytes"], capacity, "header capacity")
    expect_eq(header["trim_offset"], None, "trim offset of a new WAL (null: never trimmed)")
    expect_eq(header["shutdown_type"], "graceful", "shutdown type of a new WAL")
    expect_eq(out["created"], not run.result.loop, "created")
    run.state["ring"] = header["ring_bytes"]
    from walctl.sizes import format_size

    return f"{format_size(header['capacity_bytes'])}, ring {format_size(header['ring_bytes'])}"


def status_empty(run: Run, check: Check) -> str:
    out = run.ok("status", run.result.device, "--json", check=check).one()
    expect_eq((out["end_offset"], out["used_bytes"], out["free_bytes"]), (0, 0, run.state["ring"]),
              "end of log, used and free bytes of an empty WAL")
    expect_eq((out["scanned"], out["records"]), (False, None), "answered from the checkpoint, records not counted")
    expect_eq(out["lock_holder_pid"], None, "lock holder")
    expect_eq(sum(1 for s in out["slots"] if s["valid"]), 2, "valid header slots")
    expect_eq(out["shutdown_type"], "graceful", "shutdown type")
    return "empty, both header slots valid, no lock holder"


def status_used(run: Run, check: Check) -> str:
    state = run.state
    out = run.ok("status", run.result.device, "--scan", "--json", check=check).one()
    expect_eq(out["trim_offset"], state["trim"], "trim point")
    expect_eq(out["end_offset"], state["end"], "end of log (as recover found it)")
    expect_eq(out["used_bytes"], state["end"] - state["trim"], "used bytes (end of log - trim point)")
    expect_eq(out["used_bytes"] + out["free_bytes"], state["ring"], "used + free bytes")
    expect_eq(out["records"], len(run.appended) - 1, "records")
    expect_eq(out["shutdown_type"], "graceful", "shutdown type after clean runs")
    from walctl.sizes import format_size

    return f"used {format_size(out['used_bytes'])} ({out['used_percent']}%), free {format_size(out['free_bytes'])}"


def status_final(run: Run, check: Check) -> str:
    out = run.ok("status", run.result.device, "--scan", "--json", check=check).one()
    expect_eq(out["trim_offset"], run.state["uploaded"], "trim point after the uploads")
    expect_eq(out["records"], 0, "live records after everything was uploaded")
    expect_eq((out["findings"], out["shutdown_type"]), (0, "graceful"), "findings and shutdown type")
    return f"every record uploaded and trimmed; {_plural(out['used_bytes'], 'byte')} used (the trimmed last record)"


# -- append, recover, trim --------------------------------------------------------------------

def _append_argv(run: Run, stream: int, stdin: bool, extra: tuple) -> list[str]:
    if stdin:
        return ["append", run.result.device, "--stream", str(stream), "--input", "-", "--framing", "length-prefixed",
                "--json", *extra]
    return ["append", run.result.device, "--stream", str(stream), "--json", *extra]


def append_args(stream: int, indexes: range, *, stdin: bool, extra: Callable[[Run], tuple] = lambda run: ()):
    """The command line shown: stream 1's payloads as arguments are summarised as ``DATA xN``."""
    def args(run: Run) -> list[str] | str:
        argv = _append_argv(run, stream, stdin, extra(run))
        return argv if stdin else run.shown(*argv) + f" DATA x{len(indexes)}"
    return args


def append_stream(stream: int, indexes: range, *, stdin: bool, extra: Callable[[Run], tuple] = lambda run: ()):
    def do(run: Run, check: Check) -> str:
        payloads = run.payloads[stream]
        argv = _append_argv(run, stream, stdin, extra(run))
        if stdin:
            data = b"".join(len(payloads[i]).to_bytes(4, "big") + payloads[i] for i in indexes)
            answer = run.ok(*argv, input=data, check=check)
        else:
            answer = run.ok(*argv, *[payloads[i].decode() for i in indexes], check=check)
        lines = answer.lines()
        records = [o for o in lines if o["type"] == "record"]
        expect_eq(len(records), len(indexes), "records acknowledged")
        expect_eq([o["base_offset"] for o in records], list(indexes), "stream offsets")
        expect_eq([o["payload_bytes"] for o in records], [len(payloads[i]) for i in indexes], "payload bytes")
        offsets = [o["offset"] for o in records]
        previous = run.appended[-1][0] if run.appended else -1
        expect(all(a < b for a, b in zip([previous] + offsets, offsets)),
               f"WAL offsets must increase: {offsets} after {previous}")
        summary = lines[-1]
        expect_eq(summary["records"], len(indexes), "summary records")
        expect_eq(summary["next_base_offset"], indexes[-1] + 1, "summary next_base_offset")
        run.appended += [(off, stream, i) for off, i in zip(offsets, indexes)]
        return f"{len(indexes)} records at WAL offsets {offsets[0]}..{offsets[-1]}"
    return do


def recover_args(run: Run) -> list[str]:
    return ["recover", run.result.device, "--json", "--payload", "base64"]


def recover_check(label: str):
    def do(run: Run, check: Check) -> str:
        state = run.state
        lines = run.ok(*recover_args(run), check=check).lines()
        records = [o for o in lines if o["type"] == "record"]
        findings = [o for o in lines if o["type"] == "finding"]
        expect_eq(findings, [], "findings in a clean log")
        live = [(off, sid, soff) for off, sid, soff in run.appended
                if (sid, soff) not in run.trimmed and off > state.get("trim", -1)]
        expect_eq([o["offset"] for o in records], [off for off, _, _ in live], "record offsets")
        for o, (off, sid, soff) in zip(records, live):
            expect_eq((o["stream_id"], o["base_offset"]), (sid, soff), f"stream and offset of record {off}")
            expect(base64.b64decode(o["payload"]) == run.payloads[sid][soff],
                   f"payload of record {off} differs from what was appended")
        summary = lines[-1]
        expect_eq(summary["records"], len(live), "summary records")
        expect_eq(summary["corrupt_findings"], 0, "summary corrupt findings")
        state["end"] = summary["end_offset"]
        return f"{len(records)} records{label}, payloads as appended, no findings"
    return do


def trim(run: Run, check: Check) -> str:
    first, sid, soff = run.appended[0]
    out = run.ok("trim", run.result.device, str(first), "--scan", "--json", check=check).one()
    expect_eq((out["trim_offset"], out["records_deleted"], out["records_left"]), (first, 1, len(run.appended) - 1),
              "trim offset, records deleted and left")
    run.trimmed.add((sid, soff))
    run.state["trim"] = first
    return f"trimmed to WAL offset {first}: 1 record deleted"


# -- the store: upload, ls, inspect-object, read --------------------------------------------------

def metrics_path(run: Run) -> str:
    return os.path.join(run.result.work_dir, "walctl-upload.prom")


def upload_args(metrics: bool = False):
    def args(run: Run) -> list[str]:
        return (["upload", run.result.device, "--store", run.result.store, "--json"]
                + (["--metrics-file", metrics_path(run)] if metrics else []))
    return args


def upload(metrics: bool = False):
    def do(run: Run, check: Check) -> str:
        state = run.state
        out = run.ok(*upload_args(metrics)(run), check=check).one()
        pending = [a for a in run.appended if a[0] > state.get("uploaded", state["trim"])]
        expect_eq(out["records"], len(pending), "records uploaded")
        expect_eq(out["payload_bytes"], sum(len(run.payloads[s][o]) for _, s, o in pending), "payload bytes")
        expect(out["objects_made"] >= 1, "no object made")
        expect_eq(out["trimmed_to"], pending[-1][0], "WAL trimmed to the last uploaded record")
        expect(out["commit_number"] is not None, "no commit number")
        state["uploaded"] = pending[-1][0]
        state.setdefault("objects", []).extend(o["key"] for o in out["objects"])
        detail = (f"{_plural(out['records'], 'record')} in {_plural(out['objects_made'], 'object')}, "
                  f"commit {out['commit_number']}")
        if metrics:
            from walctl.metrics import parse_values

            with open(metrics_path(run), encoding="utf-8") as f:
                values = parse_values(f.read())
            expect_eq(values.get("walctl_upload_success"), 1.0, "walctl_upload_success in the metrics file")
            expect_eq(values.get("walctl_upload_records_total"), float(out["records"]),
                      "walctl_upload_records_total in the metrics file")
            detail += "; metrics file written"
        return detail
    return do


def ls(run: Run, check: Check) -> str:
    out = run.ok("ls", "--store", run.result.store, "--json", check=check).one()
    want = run.expected_in_store()
    streams = {s["stream_id"]: (s["start_offset"], s["end_offset"]) for s in out["streams"]}
    expect_eq(streams, {sid: (min(v), max(v) + 1) for sid, v in want.items()}, "stream ranges")
    keys = sorted(o["key"] for o in out["objects"])
    expect_eq(keys, sorted(run.state["objects"]), "live objects")
    expect_eq(out["prepared"], [], "prepared ids left after clean uploads")
    run.state["live"] = out["objects"]
    return f"{len(streams)} streams, {len(keys)} live objects"


def inspect_all(run: Run, check: Check) -> str:
    entries = 0
    for o in run.state["live"]:
        lines = run.ok("inspect-object", str(o["id"]), "--store", run.result.store, "--deep", "--json",
                       check=check).lines()
        summary = lines[-1]
        expect_eq(summary["problems"], 0, f"problems in object {o['key']}")
        expect_eq(summary["key"], o["key"], f"key of object {o['id']}")
        rows = [x for x in lines if x["type"] == "index_entry"]
        expect_eq(_merged((x["stream_id"], x["start_offset"], x["end_offset"]) for x in rows),
                  _merged((s["stream_id"], s["start"], s["end"]) for s in o["streams"]),
                  f"stream ranges of object {o['key']}'s index against the manifest")
        entries += len(rows)
    return f"{len(run.state['live'])} objects verified block by block, {entries} index entries"


def inspect_args(run: Run) -> list[str]:
    return ["inspect-object", "ID", "--store", run.result.store, "--deep", "--json"]


def read_streams(run: Run, check: Check) -> str:
    """`walctl read` of every stream: every payload in offset order, one summary, no finding."""
    want = run.expected_in_store()
    gets = 0
    for sid, payloads in sorted(want.items()):
        lines = run.ok("read", "--store", run.result.store, "--stream", str(sid), "--payload", "base64", "--json",
                       check=check).lines()
        recs = [x for x in lines if x["type"] == "record"]
        summary = lines[-1]
        expect_eq(summary["type"], "summary", f"last line of read --stream {sid}")
        expect_eq(summary["findings"], 0, f"findings reading stream {sid}")
        expect_eq([x["base_offset"] for x in recs], sorted(payloads), f"offsets read of stream {sid}")
        for x in recs:
            expect(base64.b64decode(x["payload"]) == payloads[x["base_offset"]],
                   f"stream {sid} offset {x['base_offset']}: read returned other bytes than appended")
        gets += summary["gets"]
    return f"{len(want)} streams read back in offset order, every payload as appended, {gets} GETs"


# -- compaction and gc ------------------------------------------------------------------------------

def compact_args(run: Run) -> list[str]:
    return ["compact", "--store", run.result.store, "--master", COMPACT_MASTER, "--json"]


def compact(run: Run, check: Check) -> str:
    from walctl.spark.job import MissingPrerequisite, check_java, check_pyspark

    state = run.state
    try:  # a machine without Spark's prerequisites is not a wrong answer
        check_pyspark()
        check_java()
    except MissingPrerequisite as exc:
        check.exit_code = exc.exit_code
        raise StepFailed(f"missing prerequisite: {exc.line().removeprefix('walctl: error: ')}; "
                         "--no-compact skips this step", PREREQ_MISSING) from None
    run.spark_log = os.path.join(run.result.work_dir, "spark.log")
    answer = run.process(*compact_args(run), log=run.spark_log)
    check.exit_code = answer.exit_code
    if answer.exit_code != 0:
        kind = (IO_FAILED if answer.exit_code == EXIT_IO else PREREQ_MISSING
                if answer.exit_code == EXIT_NOT_FOUND and "executors cannot import" in answer.error_line()
                else CHECK_FAILED)
        raise StepFailed(f"exit {answer.exit_code}: {answer.error_line()} (Spark log: {_tail(run.spark_log)}; "
                         f"Spark needs Java 17; --no-compact skips this step)", kind)
    out = answer.one()
    expect(not out["idle"], "compaction found nothing to do with two Stream Set Objects")
    expect_eq(out["objects_in"], len(state["objects"]), "objects compacted")
    expect(out["commit_number"] is not None, "no commit")
    state["replaced"] = sorted(state["objects"])
    state["objects"] = [o["key"] for o in out["objects"]]
    return (f"{out['objects_in']} objects into {out['objects_out']}, commit {out['commit_number']}, "
            f"{out['seconds']} s; " + run.read_back())


def gc_args(run: Run) -> list[str]:
    return ["gc", "--store", run.result.store, "--grace", "0s", "--json"]


def gc(run: Run, check: Check) -> str:
    out = run.ok(*gc_args(run), check=check).one()
    replaced = run.state.get("replaced", [])
    expect_eq(sorted(out["deleted_objects"]), replaced, "objects deleted (those compaction replaced)")
    from walctl.store import open_store

    st = open_store(run.result.store)
    for key in replaced:
        expect(not any(i.key == key for i in st.list(key)), f"replaced object {key} still in the store")
    return f"{len(out['deleted_objects'])} replaced objects deleted; " + run.read_back()


def _store_extra(run: Run) -> tuple:
    return ("--store", run.result.store)


def _status_args(*extra: str):
    return lambda run: ["status", run.result.device, *extra]


STEPS: tuple[Step, ...] = (
    Step("init", init_args, init),
    Step("status (empty)", _status_args("--json"), status_empty),
    Step("append (arguments)", append_args(1, range(3), stdin=False), append_stream(1, range(3), stdin=False)),
    Step("append (stdin)", append_args(2, range(3), stdin=True), append_stream(2, range(3), stdin=True)),
    Step("recover", recover_args, recover_check("")),
    Step("trim", lambda run: ["trim", run.result.device, "FIRST-OFFSET", "--scan", "--json"], trim),
    Step("recover (after trim)", recover_args, recover_check(" after the trim")),
    Step("status", _status_args("--scan", "--json"), status_used),
    Step("upload", upload_args(), upload()),
    Step("append --store (stream 1)", append_args(1, range(3, 5), stdin=False, extra=_store_extra),
         append_stream(1, range(3, 5), stdin=False, extra=_store_extra)),
    Step("append --store (stream 2)", append_args(2, range(3, 5), stdin=True, extra=_store_extra),
         append_stream(2, range(3, 5), stdin=True, extra=_store_extra)),
    Step("upload --metrics-file", upload_args(metrics=True), upload(metrics=True)),
    Step("ls", lambda run: ["ls", "--store", run.result.store, "--json"], ls),
    Step("inspect-object --deep", inspect_args, inspect_all),
    Step("read back objects", lambda run: "read every live object in full, compare with what was appended",
         lambda run, check: run.read_back()),
    Step("read", lambda run: ["read", "--store", run.result.store, "--stream", "ID", "--payload", "base64", "--json"],
         read_streams),
    Step("compact", compact_args, compact, compact=True),
    Step("ls + inspect-object --deep (compacted)", inspect_args,
         lambda run, check: (ls(run, check), inspect_all(run, check))[1], after_compact=True),
    Step("gc", gc_args, gc),
    Step("status (final)", _status_args("--scan", "--json"), status_final),
)
