"""walctl ls (alias: objects): the manifest's view of a store."""

from __future__ import annotations

from walctl.commands._shared import (RETRY_FOR, S3_CONNECT_TIMEOUT, S3_READ_TIMEOUT, EndpointOpt, JsonOpt, RetryForOpt,
                                     S3ConnectTimeoutOpt, S3ReadTimeoutOpt, StoreOpt, command, emit_json, s3_settings,
                                     stdout_console, utc_iso, warn)


def ls_cmd(store: StoreOpt, endpoint_url: EndpointOpt = None, retry_for: RetryForOpt = RETRY_FOR,
           s3_connect_timeout: S3ConnectTimeoutOpt = S3_CONNECT_TIMEOUT,
           s3_read_timeout: S3ReadTimeoutOpt = S3_READ_TIMEOUT, json_out: JsonOpt = False) -> None:
    """List streams with their offset ranges, live objects, prepared and replaced objects, and the last commits."""
    from walctl.store.listing import list_store

    listing = list_store(store, endpoint_url=endpoint_url,
                         s3=s3_settings(retry_for, s3_connect_timeout, s3_read_timeout))
    out = listing.to_json()
    wrong = listing.mismatches()
    if wrong:  # on stderr, with --json too: a listing is not a check, but it saw this
        from walctl.human import plural

        shown = "; ".join(f"{key}: {what}" for key, what in sorted(wrong.items())[:5])
        warn(f"{plural(len(wrong), 'live object')} {'differs' if len(wrong) == 1 else 'differ'} from the manifest "
             f"({shown}{'; ...' if len(wrong) > 5 else ''}): run 'walctl check --store {store}'")
    if json_out:
        emit_json(_iso_times(out))
        return
    from rich.table import Table
    from rich.text import Text

    from walctl import human
    from walctl.sizes import format_size

    console = stdout_console()
    doc = listing.manifest
    console.print(f"store {store}: manifest {doc.number}, next object id {doc.next_object_id}", markup=False)
    streams = Table(title="streams (stream offsets)", title_justify="left")
    for col in ("stream", "start", "end"):
        streams.add_column(col, justify="right")
    for s in out["streams"]:
        streams.add_row(str(s["stream_id"]), str(s["start_offset"]), str(s["end_offset"]))
    console.print(streams)
    objects = Table(title="live objects", title_justify="left")
    for col in ("id", "kind", "size", "key", "stream offsets [start, end)"):
        objects.add_column(col)
    for o in out["objects"]:
        size = format_size(o["size_bytes"]) + (f" ({wrong[o['key']]})" if o["key"] in wrong else "")  # not a manifest entry
        objects.add_row(str(o["id"]), o["kind"], Text(size), Text(o["key"]),  # not a manifest entry
                        Text(", ".join(f"stream {r['stream_id']} [{r['start']}, {r['end']})" for r in o["streams"])))  # not a manifest entry
    console.print(objects)
    ids = ", ".join(str(p.id) for p in doc.prepared) or human.NONE
    gone = ", ".join(str(d.id) for d in doc.deleting) or human.NONE
    console.print(f"prepared object ids: {ids}; replaced, awaiting gc: {gone}", markup=False)
    history = Table(title="last commits", title_justify="left")
    history.add_column("manifest", justify="right")
    history.add_column("time (UTC)", no_wrap=True, min_width=24)  # never cut a time short
    for col in ("command", "host"):
        history.add_column(col)
    history.add_column("commit id", no_wrap=True)
    for c in listing.commits:  # the commit id's first 8 characters, as git shows a commit (--json: all of it)
        history.add_row(str(c.number), human.iso_s(c.time), Text(c.command or human.NONE),
                        Text(c.host or human.NONE), Text((c.commit_id or human.NONE)[:8]))
    console.print(history)



def _iso_times(out: dict) -> dict:
    """The manifest's times (seconds since the epoch) as every JSON time is written (docs/CLI.md):
    a commit's ``time``, a prepared id's ``prepared_at`` and ``expires_at``, a replaced one's ``marked_at``."""
    for commit in out["last_commits"]:
        commit["time"] = utc_iso(commit["time"])
    for entry in (*out["prepared"], *out["deleting"]):
        for key in ("prepared_at", "expires_at", "marked_at"):
            if isinstance(entry.get(key), (int, float)):
                entry[key] = utc_iso(entry[key])
    return out


command("objects", help="Alias of 'ls'.")(command("ls")(ls_cmd))
