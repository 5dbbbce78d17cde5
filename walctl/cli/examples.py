"""Every command's examples: the "Examples:" epilog of its --help and the EXAMPLES section of its
man page (tools/manpage.py) are this text. tests/cli/test_examples.py runs each line with sh in a
folder holding what the lines name (``wal.img``: a 1 MiB WAL whose stream 7 goes on from the store with
records at WAL offsets 0 and 4096; ``store``: a local store holding object 1, stream 7's offsets 0 to 3), so an
example that stops working fails the suite.
"""

from __future__ import annotations

EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "walctl": (
        ("Make a 1 MiB WAL, append a record to stream 0, upload it into a local store:",
         "walctl init new.img --capacity 1MiB && walctl append new.img hello && walctl upload new.img --store new-store"),
        ("One command's options and examples:", "walctl upload --help"),
    ),
    "init": (
        ("Create a 64 MiB WAL in a new file:", "walctl init new.img --capacity 64MiB"),
        ("Re-initialise a WAL, destroying its records (even those not yet uploaded):",
         "walctl init wal.img --force --discard-unuploaded"),
    ),
    "append": (
        ("Append two records to stream 0; each WAL offset is printed once durable:",
         "walctl append wal.img hello world"),
        ("Append one record per input line to stream 7:", "printf 'a\\nb\\n' | walctl append wal.img --stream 7 --input -"),
    ),
    "recover": (
        ("List the live records and any damage found:", "walctl recover wal.img"),
        ("Stream 7's records, payloads as text, at most 10:", "walctl recover wal.img --stream 7 --limit 10 --payload text"),
        ("Count records and payload bytes per stream:", "walctl recover wal.img --stats"),
    ),
    "trim": (
        ("Delete the record at WAL offset 0 and every record before it:", "walctl trim wal.img 0"),
        ("The same, counting the records deleted and left:", "walctl trim wal.img 0 --scan"),
    ),
    "upload": (
        ("Show the objects an upload would make, writing nothing:", "walctl upload wal.img --store store --dry-run"),
        ("Upload the WAL's records into a local store, then trim the WAL:", "walctl upload wal.img --store store"),
    ),
    "salvage": (
        ("What salvage would upload and record as lost, writing nothing:",
         "walctl salvage wal.img --store store --dry-run"),
    ),
    "inspect-object": (
        ("Object 1's footer, index and streams:", "walctl inspect-object 1 --store store"),
        ("Its records too, payloads as text:", "walctl inspect-object 1 --store store --records --payload text"),
    ),
    "ls": (
        ("The store's streams, live objects and last commits:", "walctl ls --store store"),
        ("The same as one JSON document:", "walctl ls --store store --json"),
    ),
    "objects": (
        ("The store's streams, live objects and last commits (ls's other name):", "walctl objects --store store"),
    ),
    "gc": (
        ("What gc would delete, deleting nothing:", "walctl gc --store store --dry-run"),
        ("Delete orphans and expired ids now, for a cron job's metrics file:",
         "walctl gc --store store --metrics-file gc.prom"),
    ),
    "check": (
        ("Check every live object's size, footer and index against the manifest:", "walctl check --store store"),
        ("Also read the data of the first half of the objects (1/2, then 2/2 the next night):",
         "walctl check --store store --read-data --subset 1/2"),
    ),
    "compact": (
        ("The whole plan (inputs, outputs, GETs and PUTs), writing nothing:", "walctl compact --store store --dry-run"),
        ("Merge consecutive Stream Objects only (server-side copies, no Spark):",
         "walctl compact --store store --level so"),
    ),
    "status": (
        ("The WAL's fill, trim point and last shutdown, from its header:", "walctl status wal.img"),
        ("Every 5 minutes from cron: verify 256 MiB of the log per run, gauges for node_exporter:",
         "walctl status wal.img --verify-budget 256MiB --metrics-file wal.prom"),
    ),
    "selftest": (
        ("Run every step on scratch files in the temporary directory (no Spark):", "walctl selftest --no-compact"),
    ),
    "image": (
        ("Copy a WAL's live part into a file (the rest stays sparse):", "walctl image wal.img wal.copy"),
    ),
    "bench": (
        ("Measure 4 KiB random durable writes for 1 s on a new 16 MiB file:",
         "walctl bench bench.img --size 16MiB --mode iops --duration 1s"),
    ),
    "read": (
        ("Stream 7 from the store, payloads as text:", "walctl read --store store --stream 7 --payload text"),
        ("Stream 7 from the store, then what the WAL holds past it:",
         "walctl read --store store --stream 7 --wal wal.img"),
    ),
}


def epilog(name: str) -> str | None:
    """The "Examples:" epilog of command ``name``'s --help (lines kept as written), or None."""
    given = EXAMPLES.get(name)
    if not given:
        return None
    lines = ["\b", "Examples:"]
    for what, line in given:
        lines += [f"  {what}", f"    $ {line}"]
    if name == "walctl":
        from walctl.cli.manpages import hint

        lines += ["", "\b", hint()]
    return "\n".join(lines)
