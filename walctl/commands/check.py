"""walctl check: a store against its manifest (restic check / git fsck); one verdict line, exit 3 on damage."""

from __future__ import annotations

import re
from typing import Annotated

import typer

from walctl.commands._shared import (RETRY_FOR, S3_CONNECT_TIMEOUT, S3_READ_TIMEOUT, EndpointOpt, JsonOpt, RetryForOpt,
                                     S3ConnectTimeoutOpt, S3ReadTimeoutOpt, StoreOpt, command, emit_json, progress_bar,
                                     s3_settings, stdout_console)
from walctl.options import OptionError

_SUBSET = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
# What each kind of problem is called in the verdict line (walctl.pipeline.check.KINDS).
_KIND_WORDS = {"missing": ("missing object", None), "truncated": ("truncated object", None),
               "size": ("object of another size", "objects of another size"),
               "footer": ("damaged footer or index", "damaged footers or indexes"),
               "index": ("index unlike the manifest", "indexes unlike the manifest"),
               "data": ("object with damaged data", "objects with damaged data"),
               "overlap": ("overlap", None), "coverage": ("coverage gap", None),
               "orphan": ("orphan object", None), "stale_prepared": ("stale prepared id", None)}


def subset_option(value: str) -> str:
    """``K/N``: share K of N (1 <= K <= N <= 10000), as restic's --read-data-subset."""
    match = _SUBSET.match(str(value))
    if match is None or not 1 <= int(match.group(1)) <= int(match.group(2)) <= 10_000:
        raise OptionError(f"{value!r} is not a share K/N with 1 <= K <= N <= 10000",
                          "1/5 reads the data of the first fifth of the objects, 2/5 the second ...")
    return f"{int(match.group(1))}/{int(match.group(2))}"


@command("check")
def check_cmd(
    store: StoreOpt,
    read_data: Annotated[bool, typer.Option(
        "--read-data",
        help="Also read every byte of every live object and check it as 'inspect-object --deep' does (data "
             "crc, block and batch headers, contiguous offsets): as many bytes as the store holds, in ranged "
             "GETs of about 16 MiB, one held at a time. Without it: one LIST and one ranged GET of each "
             "object's footer and index.")] = False,
    subset: Annotated[str | None, typer.Option(
        "--subset", metavar="K/N", parser=subset_option,
        help="With --read-data (implied): read the data of share K of N of the objects only (an object is in "
             "share K when its id mod N is K-1), so N runs, 1/N to N/N, read all of them once. The others get "
             "the footer and index check.")] = None,
    endpoint_url: EndpointOpt = None,
    retry_for: RetryForOpt = RETRY_FOR,
    s3_connect_timeout: S3ConnectTimeoutOpt = S3_CONNECT_TIMEOUT,
    s3_read_timeout: S3ReadTimeoutOpt = S3_READ_TIMEOUT,
    json_out: JsonOpt = False,
) -> None:
    """Check a store against its newest manifest (read-only), as restic check or git fsck do.

    Every live object must exist with the manifest's size (one LIST), its footer and index must
    parse and hold the stream offsets the manifest gives it (one ranged GET of its tail), and
    the live objects must cover every stream's offsets without overlap; --read-data checks every
    block too. Objects nothing references (orphans) and expired prepared ids are listed but are
    not damage: walctl gc removes them. Ends with one verdict line. Exit 0 when nothing is
    damaged, 3 when something is, 4 when there is no store or manifest.
    """
    from walctl.errors import CorruptionError
    from walctl.pipeline.check import check_store
    from walctl.store import open_store

    share = tuple(int(n) for n in subset.split("/")) if subset else None
    st = open_store(store, endpoint_url=endpoint_url, create=False,
                    s3=s3_settings(retry_for, s3_connect_timeout, s3_read_timeout))
    with progress_bar(None, "reading object data", json_out=json_out or not (read_data or share),
                      lazy=True) as progress:
        result = check_store(st, read_data=read_data, subset=share, progress=progress)
    out = {**result.to_json(), "store": store, "verdict_line": verdict(result)}
    if json_out:
        if not result.damage:
            emit_json(out)
    else:
        _render(result)
        stdout_console().print(out["verdict_line"], markup=False)
    if result.damage:
        from walctl.human import plural

        first = result.damage[0]
        what = f"object {first.object_id} " if first.object_id is not None else ""
        hint = "'problems' lists every problem" if json_out else "every problem is listed above"
        if first.object_id is not None and first.kind not in ("missing", "overlap", "coverage"):
            hint = f"'walctl inspect-object --deep {first.object_id} --store {store}' shows the object's damage"
        raise CorruptionError(f"the store is damaged: {plural(len(result.damage), 'problem')}; first: {what}"
                              f"{first.detail}", where=first.key or store, hint=hint,
                              summary=out if json_out else None)


def verdict(result) -> str:
    """The one line: ``check: 0 problems in 12 objects (3.1 MiB); ...`` or ``check: 3 problems in ...: 1
    truncated object, ...``, with what was read and what gc would remove."""
    from walctl.human import plural
    from walctl.sizes import format_size

    def counted(problems) -> str:
        kinds: dict[str, int] = {}
        for p in problems:
            kinds[p.kind] = kinds.get(p.kind, 0) + 1
        return ", ".join(plural(n, *_KIND_WORDS[k]) for k, n in kinds.items())

    damage = result.damage
    line = (f"check: {plural(len(damage), 'problem')} in {plural(result.objects, 'live object')} "
            f"({format_size(result.size_bytes)})")
    if damage:
        line += f": {counted(damage)}"
    if not result.read_data:
        line += "; footers and indexes checked, data not read (--read-data checks every block)"
    elif result.subset is not None:
        k, n = result.subset
        line += f"; every block of {plural(result.data_objects, 'object')} read (share {k}/{n})"
    else:
        line += f"; every block of {plural(result.data_objects, 'object')} read"
    leftovers = [p for p in result.problems if not p.damage]
    if leftovers:
        line += f"; also {counted(leftovers)} (not damage: walctl gc removes them)"
    return line


def _render(result) -> None:
    """The problems, one row each (nothing when there are none: the verdict says so)."""
    if not result.problems:
        return
    from rich.table import Table
    from rich.text import Text

    from walctl import human

    table = Table(title="problems", title_justify="left")
    for col in ("kind", "damage", "object", "key", "detail"):
        table.add_column(col)
    for p in result.problems:
        table.add_row(p.kind.replace("_", " "), "yes" if p.damage else "no",
                      human.NONE if p.object_id is None else str(p.object_id), Text(p.key or human.NONE),
                      Text(p.detail))
    stdout_console().print(table)
