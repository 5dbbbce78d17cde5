"""walctl ls (alias: objects): the manifest's view of a store."""

from __future__ import annotations

from walctl.commands._shared import EndpointOpt, JsonOpt, StoreOpt, command, emit_json, stdout_console


def ls_cmd(store: StoreOpt, endpoint_url: EndpointOpt = None, json_out: JsonOpt = False) -> None:
    """List streams with their offset ranges, live objects, prepared and replaced objects, and the last commits."""
    from walctl.store import manifest as mf
    from walctl.store import open_store

    st = open_store(store, endpoint_url=endpoint_url, create=False)
    doc = mf.load_latest(st, required=True)
    numbers = mf.manifest_numbers(st)
    commits = []
    for number in numbers[-5:]:
        m = mf.load(st, number)
        commits.append({"number": number, "commit_id": m["commit_id"], "time": m["time"],
                        "command": (m["writer"] or {}).get("command"), "host": (m["writer"] or {}).get("host")})
    out = {
        "store": store, "manifest_number": doc["number"], "next_object_id": doc["next_object_id"],
        "compactor_epoch": doc["compactor_epoch"],
        "streams": [{"stream_id": int(k), "start_offset": v["start"], "end_offset": v["end"]}
                    for k, v in sorted(doc["streams"].items(), key=lambda kv: int(kv[0]))],
        "objects": [{"id": o["id"], "key": o["key"], "kind": o["kind"], "size_bytes": o["size"],
                     "streams": o["ranges"]} for o in doc["objects"]],
        "prepared": doc["prepared"], "deleting": doc["deleting"], "wal_uploads": doc["wal_uploads"],
        "last_commits": commits,
    }
    if json_out:
        emit_json(out)
        return
    from rich.table import Table
    from rich.text import Text

    from walctl import human
    from walctl.sizes import format_size

    console = stdout_console()
    console.print(f"store {store}: manifest {doc['number']}, next object id {doc['next_object_id']}", markup=False)
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
        objects.add_row(str(o["id"]), o["kind"], format_size(o["size_bytes"]), Text(o["key"]),
                        Text(", ".join(f"stream {r['stream_id']} [{r['start']}, {r['end']})" for r in o["streams"])))
    console.print(objects)
    ids = ", ".join(str(p["id"]) for p in doc["prepared"]) or human.NONE
    gone = ", ".join(str(d["id"]) for d in doc["deleting"]) or human.NONE
    console.print(f"prepared object ids: {ids}; replaced, awaiting gc: {gone}", markup=False)
    history = Table(title="last commits", title_justify="left")
    history.add_column("manifest", justify="right")
    history.add_column("time (UTC)", no_wrap=True, min_width=24)  # never cut a time short
    for col in ("command", "host"):
        history.add_column(col)
    history.add_column("commit id", no_wrap=True)
    for c in commits:  # the commit id's first 8 characters, as git shows a commit (--json: all of it)
        history.add_row(str(c["number"]), human.iso_s(c["time"]), Text(c["command"] or human.NONE),
                        Text(c["host"] or human.NONE), Text((c["commit_id"] or human.NONE)[:8]))
    console.print(history)


command("objects", help="Alias of 'ls'.")(command("ls")(ls_cmd))
