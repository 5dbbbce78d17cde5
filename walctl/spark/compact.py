"""compact: SSO compaction (FORMATS.md 4) on the driver: plan, fence, run the Spark job, commit.

1. Read the manifest and the index of every input SSO (footers and indexes only).
2. Plan (walctl.spark.plan): drop deleted and expired ranges, SOs for big or gapped
   streams, the rest into SSOs, iterations under the memory limit.
3. One commit bumps ``compactor_epoch`` (fencing any older compactor) and prepares the
   output ids.
4. The Spark job writes the outputs.
5. One commit replaces the inputs with the outputs, refused unless the epoch is still
   ours, every input is still live, and the outputs cover every kept input range
   exactly once. Replaced inputs go to ``deleting``; gc removes them after the grace.
A kill anywhere before 5 commits nothing: only prepared ids remain, for gc.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from walctl.errors import CorruptionError, RefusedError
from walctl.failpoints import failpoint
from walctl.store import manifest as mf

# The derived read rate spreads a big compaction over its interval; it never goes below this,
# so a small compaction does not crawl for the whole interval.
MIN_DERIVED_READ_RATE_BPS = 32 << 20


@dataclass
class CompactResult:
    plan: object
    idle: bool
    dry_run: bool
    objects_in: int = 0
    objects_out: int = 0
    made: list[dict] = field(default_factory=list)
    commit_number: int | None = None
    epoch: int | None = None
    index_gets: int = 0
    seconds: float = 0.0
    read_rate_bps: float | None = None

    def to_json(self) -> dict:
        plan = self.plan.to_json() if self.plan is not None else None
        gets = sum(m["gets"] for m in self.made) + self.index_gets
        return {
            "idle": self.idle, "dry_run": self.dry_run, "objects_in": self.objects_in,
            "objects_out": self.objects_out,
            "bytes_read": sum(m["bytes_read"] for m in self.made) if self.made else 0,
            "bytes_written": sum(m["bytes_written"] for m in self.made) if self.made else 0,
            "gets": gets, "puts": sum(m["puts"] for m in self.made),
            "iterations": len(self.plan.iterations) if self.plan is not None else 0,
            "commit_number": self.commit_number, "compactor_epoch": self.epoch,
            "read_rate_limit_mib_per_s": round(self.read_rate_bps / (1 << 20), 3) if self.read_rate_bps else None,
            "seconds": round(self.seconds, 3),
            "objects": [{"key": m["key"], "size_bytes": m["size"], "iteration": m["iteration"],
                         "streams": m["ranges"]} for m in self.made],
            "plan": plan,
        }


def read_indexes(store, objects: list[dict]) -> tuple[dict, int]:
    """Footer + index of each object (one or two ranged reads each); returns (indexes, gets)."""
    from walctl.store.inspect import inspect

    indexes, gets = {}, 0
    for o in objects:
        result = inspect(store, o["key"])
        indexes[o["id"]] = result.entries
        gets += result.reads
    return indexes, gets


def compact(store, store_url: str, *, endpoint_url: str | None = None, master: str = "local[*]",
            memory_limit: int = 200 << 20, split_size: int = 16 << 20, max_objects: int = 1000,
            retention: dict[int, int] | None = None, dry_run: bool = False, namespace: str = mf.DEFAULT_NAMESPACE,
            spark=None, progress=None, read_rate_bps: float | None = None,
            interval_s: float | None = None) -> CompactResult:
    """Plan, fence, run and commit one compaction (see the module doc).

    Read throttling: ``read_rate_bps`` if given; else, with ``interval_s`` (how often compaction
    runs), the rate that reads the planned bytes in 80% of the interval, as AutoMQ derives its
    own, but at least 32 MiB/s; else unlimited.
    """
    from walctl.spark.plan import check_coverage, plan_compaction

    started = time.monotonic()
    doc = mf.load_latest(store)
    candidates = sorted((o for o in doc["objects"] if o["kind"] == "SSO"), key=lambda o: (o["order_id"], o["id"]))
    candidates = candidates[:max_objects]
    indexes, index_gets = read_indexes(store, candidates)
    plan = plan_compaction(doc, indexes, memory_limit=memory_limit, split_size=split_size,
                           max_objects=max_objects, retention=retention)
    result = CompactResult(plan, plan.idle, dry_run, objects_in=len(plan.inputs),
                           objects_out=len(plan.outputs), index_gets=index_gets)
    if plan.idle or dry_run:
        result.seconds = time.monotonic() - started
        return result
    check_coverage(plan)

    outputs = plan.outputs
    state: dict = {}

    def start(m: dict) -> None:
        m["compactor_epoch"] += 1
        state["epoch"] = m["compactor_epoch"]
        state["prepared"] = mf.prepare_ids(m, len(outputs), namespace)

    mf.commit(store, start, command="compact (fence + prepare)")
    result.epoch = state["epoch"]
    failpoint("compact-after-prepare")

    from walctl.spark.job import owns_new_session, run_iterations, spark_session

    ours = spark is None and owns_new_session()  # never stop a session the caller already had
    session = spark if spark is not None else spark_session(master)
    try:
        keys = [p["key"] for p in state["prepared"]]
        rate = read_rate_bps or (max(plan.bytes_read / (0.8 * interval_s), MIN_DERIVED_READ_RATE_BPS)
                                 if interval_s else None)
        result.read_rate_bps = rate
        made = run_iterations(session, plan, keys, store_url, endpoint_url, progress, rate)
    finally:
        if ours:
            session.stop()
    failpoint("compact-before-commit")
    _check_made(plan, made)
    input_ids = {o["id"] for o in plan.inputs}
    by_key = {p["key"]: p["id"] for p in state["prepared"]}
    first_order = min(o["order_id"] for o in plan.inputs)
    data_time = max(o.get("data_time", 0) for o in plan.inputs)

    def finish(m: dict) -> None:
        if m["compactor_epoch"] != state["epoch"]:
            raise RefusedError(f"fenced: another compactor started (epoch {state['epoch']} -> "
                               f"{m['compactor_epoch']}); this run commits nothing", where=store.url,
                               hint="its objects are left for gc")
        live = {o["id"] for o in m["objects"]}
        gone = sorted(input_ids - live)
        if gone:
            raise RefusedError(f"input objects {gone} are no longer live; this run commits nothing",
                               where=store.url, hint="rerun compact")
        ours = set(by_key.values())
        if not ours <= {p["id"] for p in m["prepared"]}:
            raise RefusedError("the prepared output ids were collected by gc during the run",
                               where=store.url, hint="rerun compact with a longer gc --grace")
        now = time.time()
        m["deleting"].extend({"id": o["id"], "key": o["key"], "marked_at": now}
                             for o in m["objects"] if o["id"] in input_ids)
        m["objects"] = [o for o in m["objects"] if o["id"] not in input_ids]
        m["prepared"] = [p for p in m["prepared"] if p["id"] not in ours]
        for out in made:
            oid = by_key[out["key"]]
            m["objects"].append({"id": oid, "key": out["key"], "kind": out["kind"], "size": out["size"],
                                 "order_id": first_order if out["kind"] == "SSO" else oid,
                                 "data_time": data_time, "ranges": out["ranges"]})
        for sid, start_offset in (retention or {}).items():
            s = m["streams"].get(str(sid))
            if s is not None:
                s["start"] = max(s["start"], start_offset)

    committed = mf.commit(store, finish, command="compact")
    result.commit_number = committed.number
    result.made = made
    result.seconds = time.monotonic() - started
    return result


def _check_made(plan, made: list[dict]) -> None:
    """The uploaded objects must hold exactly what the plan said (no double, no hole)."""
    want = sorted((sid, s, e) for out in plan.outputs for (sid, s, e, _) in out.streams)
    got = sorted((r["stream_id"], r["start"], r["end"]) for m in made for r in m["ranges"])
    if want != got:
        raise CorruptionError("compaction outputs do not match the plan; nothing committed",
                              hint=f"planned {len(want)} stream ranges, made {len(got)}")
