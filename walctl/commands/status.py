"""walctl status: header slots, space used and free, end of log, last shutdown, lock holder."""

from __future__ import annotations

from typing import Annotated

import typer

from walctl.commands._shared import (DeviceArg, JsonOpt, command, emit_json, metrics_path, progress_bar, stdout_console,
                                     warn)


def _verify_budget(value):
    """--verify-budget's parser: walctl.options.Size(4 KiB to 1 TiB), loaded only when the option is
    given (a status without it does not load walctl.options)."""
    from walctl.options import Size

    return Size(min=4096, max=1 << 40)(value)


_verify_budget.__name__ = "size"


@command("status")
def status_cmd(
    device: DeviceArg,
    metrics_file: Annotated[str | None, typer.Option(
        "--metrics-file", metavar="PATH", parser=metrics_path,
        help="Also write the WAL's state as Prometheus gauges for node_exporter's textfile collector "
             "(name it *.prom), labelled device and node_id: used_percent, free_bytes, trim_lag_bytes "
             "(bytes not yet uploaded and trimmed), last_shutdown_graceful, up, and corrupt_findings when the "
             "run verified records (--scan, --verify-budget; absent otherwise, never 0). Other "
             "WALs' and jobs' samples in the file are kept; replaced atomically. Run it from cron to "
             "alert before the WAL is full (exit 7).")] = None,
    scan: Annotated[bool, typer.Option(
        "--scan", help="Scan the live records (reads the used part of the ring) even when the checkpoint of a "
             "cleanly closed WAL answers: counts records, streams and findings.")] = False,
    verify_budget: Annotated[int | None, typer.Option(
        "--verify-budget", metavar="SIZE", parser=_verify_budget,
        help="Verify at most SIZE bytes of the live log this run (4KiB to 1 TiB; 64MiB ...), going on "
             "from the record where the last run stopped (remembered in --state-file) and starting "
             "again at the trim point after the end of the log: a cron job reads the whole log over "
             "a few runs. Exit 3 while a finding a crash does not explain is known in the live log; "
             "--metrics-file gets walctl_wal_corrupt_findings, _verified_bytes and "
             "_verified_through_offset. Reads about SIZE plus one record and 4 KiB (a damaged range "
             "is read to its end).")] = None,
    state_file: Annotated[str | None, typer.Option(
        "--state-file", metavar="PATH",
        help="Where --verify-budget remembers how far it verified and what it found (a small JSON "
             "file, one entry per device, replaced atomically); default: the --metrics-file path "
             "with '.verify-state' added.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Show a WAL's state: both header slots (and which is current), capacity, trim point, end of log,
    used and free bytes, the last writer's shutdown type, the sliding window and the lock holder.

    Read-only: takes no lock and never writes, so it is safe on a live or a broken device. On a
    cleanly closed WAL the end of the log and the streams' next offsets come from the checkpoint
    in its header slot: only the two header slots (8 KiB) are read, and the record counts are
    shown as unknown. Otherwise, or with --scan, they come from a scan of the live records (as
    recover does), which reads the used part of the ring. Used bytes are counted as the writer
    counts them: end of log minus the trim point (on a damaged log, the durable end when
    damage lies past the last valid record). A scan reads past damage below the durable end
    (as recover does), so its figures count every intact record. Exit 3 when a scan finds
    damage a crash does not explain (details: walctl recover); damage seen while a writer
    started, stopped or trimmed (the header slots changed) is rescanned instead, at most 3
    times ("log_moved": true, exit 0). Sealed crash holes and
    stream gaps (found by a scan) are listed with their cause and what to do.

    For cron: --verify-budget verifies the live log a budget at a time, going on where the last
    run stopped, and exits 3 while it knows of a finding a crash does not explain (the README's
    crontab: status DEVICE --verify-budget 256MiB --metrics-file PATH).
    """
    from walctl.status import wal_status

    from walctl.errors import WalctlError

    if metrics_file is not None:
        from walctl import metrics  # (with tempfile): only for a metrics file

        metrics.check_path(metrics_file)
    verify = _verify_request(verify_budget, state_file, metrics_file)
    try:
        with progress_bar(None, "scanning the WAL", json_out=json_out, lazy=True) as progress:
            result = wal_status(device, scan=scan, progress=progress, verify=verify)
    except WalctlError:
        if metrics_file is not None:  # the WAL is unreadable: say so to the alerting too
            metrics.write_wal_status(metrics_file, None, device=device, node_id="")
        raise
    for message in result.warnings:
        warn(message)
    out = result.to_json()
    if metrics_file is not None:
        node = out["node_id"]
        metrics.write_wal_status(metrics_file, out, device=device,
                                 node_id="" if node is None or node < 0 else str(node))
    if not json_out:
        _render(out)
    if result.verification is not None:
        _raise_known_corruption(out, device)
    if result.corrupt:  # (the verdict: only for a scan's findings)
        from walctl.wal.verdict import unexplained_error

        exc = unexplained_error(result.corrupt, device, hint="see 'walctl recover'", summary=out)
        if exc is not None:
            raise exc
    if json_out:
        emit_json(out)


def _verify_request(budget: int | None, state_file: str | None, metrics_file: str | None):
    """The --verify-budget request, its state file named (exit 2 when nothing names one)."""
    from walctl.errors import UsageError

    if budget is None:
        if state_file is not None:
            raise UsageError("--state-file is only used with --verify-budget",
                             hint="walctl status DEVICE --verify-budget 64MiB --metrics-file PATH")
        return None
    from walctl.status import VerifyRequest
    from walctl.wal.verify import check_state_path, default_state_path

    if state_file is None:
        if metrics_file is None:
            raise UsageError("--verify-budget needs a file to remember how far it verified",
                             hint="give --metrics-file PATH (the state goes beside it) or --state-file PATH")
        state_file = default_state_path(metrics_file)
    check_state_path(state_file)
    return VerifyRequest(budget, state_file)


def _raise_known_corruption(out: dict, device: str) -> None:
    """Exit 3 while the verification knows a finding a crash does not explain in the live log."""
    from walctl import human
    from walctl.errors import CorruptionError

    known = out["verification"]["corrupt"]
    if known:
        first = known[0]
        raise CorruptionError(f"{human.plural(len(known), 'finding')} a crash does not explain in the live log (incremental "
                              f"verification); first: {first['kind']} at offset {first['offset']} ({first['reason']})",
                              where=device, offset=first["offset"],
                              hint=f"see 'walctl recover {device} --from {first['offset']}'", summary=out)


def _render(out: dict) -> None:
    from rich.table import Table
    from rich.text import Text

    from walctl import human

    def size(value) -> str:
        return "unknown" if value is None else human.size(value, exact=True)

    def pct(value) -> str:
        return "" if value is None else f", {value:.2f}%"

    table = Table(title=Text(f"WAL {out['device']}"), show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    add = table.add_row

    def row(name: str, value: str) -> None:
        add(name, Text(value))  # Text: error messages may hold [brackets], never rich markup

    row("flavour", out["flavour"])
    for slot in out["slots"]:
        row(f"header slot {slot['slot']}", _slot_text(slot))
    row("capacity", size(out["capacity_bytes"]))
    row("ring", size(out["ring_bytes"]))
    row("trim point", "- (never trimmed)" if out["trim_offset"] < 0 else f"WAL offset {out['trim_offset']}")
    row("end of log", "unknown" if out["end_offset"] is None else f"WAL offset {out['end_offset']}")
    row("used", size(out["used_bytes"]) + pct(out["used_percent"]))
    row("free", size(out["free_bytes"]) + pct(out["free_percent"]))
    if out["records"] is not None:
        row("live records", f"{human.plural(out['records'], 'record')} in {human.plural(out['streams'], 'stream')}, "
                            f"{human.size(out['payload_bytes'])} payload")
        row("findings", f"{out['findings']} ({out['corrupt_findings']} not explained by a crash)")
        if out["durable_end"] is not None:
            row("durable end", f"{out['durable_end']} (damage below it is corruption)")
        if not out["complete"]:
            row("scan", f"INCOMPLETE: stopped by {out['stopped_by']}; part of the log was not read")
    else:
        row("live records", "not counted: answered from the checkpoint (--scan counts them)")
    cp = out["checkpoint"]
    if cp is not None:
        row("checkpoint", f"log end {cp['log_end_offset']}, {human.plural(cp['streams'], 'stream')}"
                          + (" (all the log ever held)" if cp["complete"] else "")
                          + ("" if out["scanned"] else ", used for this answer"))
    for name, text in _scan_rows(out):
        row(name, text)
    if out.get("verification") is not None:
        row("verification", _verify_text(out["verification"]))
    row("last shutdown", out["shutdown_type"] +
                  (" (the last writer did not close cleanly, or is still running)"
                   if out["shutdown_type"] == "ungraceful" else ""))
    row("sliding window", size(out["sliding_window_max_length_bytes"]))
    row("node id", human.NONE if out["node_id"] in (None, -1) else str(out["node_id"]))
    holder = out["lock_holder_pid"]
    row("lock holder", "none" if holder is None else
                  f"pid {holder}" + (f" ({out['lock_holder_command']})" if out["lock_holder_command"] else "")
                  + (f", trimming ({out['lock_holder_trim']})" if out.get("lock_holder_trim") else ""))
    stdout_console().print(table)


def _slot_text(slot: dict) -> str:
    from walctl import human

    if not slot["valid"]:
        return f"INVALID: {slot.get('error', '')}"
    mark = " (current)" if slot["current"] else ""
    h = slot["header"]
    following = "" if h["next_offset"] is None else f", next {h['next_offset']}"  # AutoMQ: no nextOffset
    return (f"valid{mark}: written {human.iso_ns(slot['last_write_timestamp_ns'])}, trim "
            f"{h['trim_offset'] if h['trim_offset'] >= 0 else human.NONE}{following}, {h['shutdown_type']}")


def _verify_text(v: dict) -> str:
    from walctl import human

    state = ("pass complete: the next run starts at the trim point" if v["pass_complete"]
             else f"the next run starts at WAL offset {v['next_offset']}")
    return (f"WAL offsets {v['from_offset']}..{v['verified_through_offset']} "
            f"({human.size(v['verified_bytes'])}, {human.plural(v['records'], 'record')}) verified; {state}; "
            f"{human.plural(v['corrupt_findings'], 'known finding')} a crash does not explain")


def _scan_rows(out: dict) -> list[tuple[str, str]]:
    """The sealed crash holes and stream gaps a scan found, one row each."""
    rows = []
    for hole in out.get("sealed_holes") or []:
        cost = ", ".join(f"stream {c['stream_id']} offsets {c['from']}..{c['to']}" for c in hole["streams"])
        rows.append(("sealed hole", f"{hole['hole_start']}..{hole['hole_end']}: a crash lost it, sealed at "
                                    f"{hole['sealed_at']}; cost {cost or 'no stream offsets'}"))
    rows += [("stream gap", gap["explanation"]) for gap in out.get("stream_gaps") or []]  # not a manifest entry
    return rows
