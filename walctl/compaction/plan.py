"""The compaction plan's model (docs/FORMATS.md 4): which ranges go where, read how, in which iteration.

Frozen dataclasses, pure: SSO compaction's planner (walctl.compaction.planner) makes them, SO
compaction and force split describe their copies with them (so.coverage_plan,
split.coverage_plan), ``walctl.compaction.coverage.check_coverage`` proves any of them before
a commit, and the Spark job (walctl.spark) carries an SSO plan out.

The unit is an index entry of an input object (a ``SourceRange``): a DataBlock or
a run of consecutive DataBlocks of one stream, copied verbatim, never cut. Every
source range of an output gets an index entry of its own there, so an output
object is ``sum(range sizes) + 36 * ranges + 48`` bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from walctl import defaults
from walctl.format.object import FOOTER_SIZE, INDEX_ENTRY_SIZE

if TYPE_CHECKING:
    from walctl.store.manifest import LiveObject

SSO = "SSO"
SO = "SO"

DEFAULT_MEMORY_LIMIT = defaults.DEFAULT_MEMORY_LIMIT  # AutoMQ's default compaction cache
DEFAULT_SPLIT_SIZE = defaults.DEFAULT_SPLIT_SIZE  # FORMATS.md 3: a stream this large gets its own Stream Object
DEFAULT_MAX_OBJECTS = 1000  # bounds the index reads and the size of one commit
DEFAULT_READ_CUT = 16 << 20  # FORMATS.md 4: one ranged GET reads at most this much

MULTIPART_THRESHOLD = defaults.MULTIPART_THRESHOLD_BYTES  # FORMATS.md 4: objects above this are uploaded in parts
MULTIPART_PART_SIZE = defaults.DEFAULT_PART_BYTES  # the store's part size (walctl.store.base)

DROP_DELETED = "stream deleted"
DROP_RETENTION = "below retention start"
DROP_STREAM_START = "below stream start"


# --- the plan ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class SourceRange:
    """One index entry of an input object: stream offsets [start_offset, end_offset) in
    object bytes [position, position + size)."""

    object_id: int
    key: str
    stream_id: int
    start_offset: int
    end_offset: int
    record_count: int
    position: int
    size: int

    @property
    def end_position(self) -> int:
        return self.position + self.size

    def to_json(self) -> dict:
        return {"object_id": self.object_id, "key": self.key, "stream_id": self.stream_id,
                "start_offset": self.start_offset, "end_offset": self.end_offset,
                "record_count": self.record_count, "block_position": self.position, "size_bytes": self.size}


@dataclass(frozen=True)
class Read:
    """One ranged GET: bytes [start, end) of a source object, holding ``ranges`` back to back."""

    object_id: int
    key: str
    start: int
    end: int
    ranges: tuple[SourceRange, ...]

    @property
    def size(self) -> int:
        return self.end - self.start

    def to_json(self) -> dict:
        return {"object_id": self.object_id, "key": self.key, "start_position": self.start,
                "end_position": self.end, "size_bytes": self.size, "range_count": len(self.ranges)}


@dataclass(frozen=True)
class Piece:
    """The bytes of one output written in one iteration: output data [position, position + data_bytes).

    An output written in one piece is one PUT, its IndexBlock and Footer included; an output
    of several pieces is one multipart upload, piece ``part`` is its part ``part`` and the
    driver adds one more part, the IndexBlock and Footer (FORMATS.md 4).
    """

    output: int  # index into CompactionPlan.outputs
    part: int  # 1-based
    ranges: tuple[SourceRange, ...]
    position: int
    data_bytes: int
    final: bool

    def to_json(self) -> dict:
        return {"output": self.output, "part": self.part, "position": self.position,
                "data_bytes": self.data_bytes, "final": self.final, "range_count": len(self.ranges)}


@dataclass(frozen=True)
class OutputObject:
    """One object to write: its source ranges in output order, written in ``pieces``.

    ``streams`` holds (stream_id, start_offset, end_offset, bytes) per contiguous run of a
    stream, bytes being the ranges' sizes (DataBlock headers included, as copied). A Stream
    Object holds one run; the Stream Set Object may hold several runs of a stream with an
    offset gap between them.
    """

    kind: str
    ranges: tuple[SourceRange, ...]
    data_bytes: int
    size_bytes: int
    streams: tuple[tuple[int, int, int, int], ...]
    pieces: tuple[Piece, ...] = ()

    @property
    def multipart(self) -> bool:
        return len(self.pieces) > 1

    @property
    def puts(self) -> int:
        """One PUT (or put_large's own multipart above 32 MiB); several pieces: create, one part per
        piece, the tail part (IndexBlock + Footer, the driver's) and complete."""
        if len(self.pieces) > 1:
            return 3 + len(self.pieces)
        return put_count(self.size_bytes)

    def to_json(self) -> dict:
        return {"kind": self.kind, "data_bytes": self.data_bytes, "size_bytes": self.size_bytes,
                "puts": self.puts, "parts": len(self.pieces),
                # the manifest's range shape, so the commit can record it as the object's "ranges"
                "streams": [{"stream_id": s, "start": a, "end": b, "bytes": n} for s, a, b, n in self.streams],
                "ranges": [r.to_json() for r in self.ranges]}


@dataclass(frozen=True)
class Iteration:
    """One memory-limited batch: the pieces it writes and the GETs (per source object) that feed them."""

    index: int
    pieces: tuple[Piece, ...]
    reads: tuple[Read, ...]
    data_bytes: int

    def to_json(self, outputs: Sequence[OutputObject] = ()) -> dict:
        out = {"index": self.index, "data_bytes": self.data_bytes, "gets": len(self.reads),
               "pieces": [p.to_json() for p in self.pieces],
               "reads": [r.to_json() for r in self.reads]}
        if outputs:
            out["outputs"] = [{**outputs[p.output].to_json(), "output": p.output, "part": p.part}
                              for p in self.pieces]
        return out


@dataclass(frozen=True)
class Dropped:
    """A source range left out of every output, and why (one of the DROP_* texts)."""

    range: SourceRange
    reason: str

    def to_json(self) -> dict:
        return {**self.range.to_json(), "reason": self.reason}


@dataclass(frozen=True)
class CompactionPlan:
    """What a compaction run reads, drops and writes; ``idle`` when there is nothing worth doing.

    ``outputs`` are at most one Stream Set Object plus one Stream Object per contiguous run
    of a stream of at least ``split_size`` bytes; ``iterations`` write them piece by piece.
    ``oversized`` lists the ranges larger than ``task_memory`` (each alone in its
    iteration, which therefore exceeds the limit).
    """

    inputs: tuple[LiveObject, ...]  # the manifest's entries (copies)
    dropped: tuple[Dropped, ...]
    iterations: tuple[Iteration, ...]
    idle: bool
    reason: str
    memory_limit: int
    split_size: int
    oversized: tuple[SourceRange, ...] = ()
    read_cut: int = DEFAULT_READ_CUT
    outputs: tuple[OutputObject, ...] = ()
    min_part: int = 1
    tasks: int = 1  # iterations that run at once, each with at most task_memory data bytes

    @property
    def task_memory(self) -> int:
        """Data bytes one iteration holds at most (oversized ranges aside)."""
        return max(1, self.memory_limit // self.tasks)

    @property
    def kept(self) -> tuple[SourceRange, ...]:
        """Every source range written, in output order."""
        return tuple(r for o in self.outputs for r in o.ranges)

    @property
    def gets(self) -> int:
        """Ranged GETs of object data: per iteration and source object, adjacent blocks joined."""
        return sum(len(it.reads) for it in self.iterations)

    @property
    def puts(self) -> int:
        return sum(o.puts for o in self.outputs)

    @property
    def bytes_read(self) -> int:
        return sum(r.size for it in self.iterations for r in it.reads)

    @property
    def bytes_written(self) -> int:
        return sum(o.size_bytes for o in self.outputs)

    @property
    def dropped_bytes(self) -> int:
        return sum(d.range.size for d in self.dropped)

    def summary_json(self) -> dict:
        """The plan's settings, inputs and totals: what every rendering of it shares (to_json adds
        every list; compact's --json, walctl.spark.compact.plan_json, bounded forms of them)."""
        return {
            "idle": self.idle, "reason": self.reason,
            "memory_limit_bytes": self.memory_limit, "split_size_bytes": self.split_size,
            "read_cut_bytes": self.read_cut, "min_part_bytes": self.min_part,
            "tasks": self.tasks, "task_memory_bytes": self.task_memory,
            "input_count": len(self.inputs), "input_ids": [o.id for o in self.inputs],
            "input_bytes": sum(o.size for o in self.inputs),
            "inputs": [o.to_json() for o in self.inputs],
            "dropped_count": len(self.dropped), "dropped_bytes": self.dropped_bytes,
            "iteration_count": len(self.iterations), "output_count": len(self.outputs),
            "so_count": sum(o.kind == SO for o in self.outputs),
            "sso_count": sum(o.kind == SSO for o in self.outputs),
            "gets": self.gets, "puts": self.puts,
            "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
        }

    def to_json(self) -> dict:
        return {
            **self.summary_json(),
            "dropped": [d.to_json() for d in self.dropped],
            "oversized": [r.to_json() for r in self.oversized],
            "outputs": [o.to_json() for o in self.outputs],
            "iterations": [it.to_json(self.outputs) for it in self.iterations],
        }



# --- helpers the planner and the coverage check share ---------------------------------------

def _key(r: SourceRange) -> tuple[int, int]:
    return (r.stream_id, r.start_offset)

def _stream_spans(ranges: Sequence[SourceRange]) -> tuple[tuple[int, int, int, int], ...]:
    """(stream, start, end, bytes) per contiguous run of a stream in ``ranges`` (sorted by (stream, start))."""
    spans: list[list[int]] = []
    for r in ranges:
        if spans and spans[-1][0] == r.stream_id and r.start_offset == spans[-1][2]:
            spans[-1][2] = r.end_offset
            spans[-1][3] += r.size
        else:
            spans.append([r.stream_id, r.start_offset, r.end_offset, r.size])
    return tuple(tuple(s) for s in spans)  # type: ignore[misc]

def object_size(data_bytes: int, range_count: int) -> int:
    """An output's size: its blocks, one index entry per source range, the footer."""
    return data_bytes + INDEX_ENTRY_SIZE * range_count + FOOTER_SIZE


def put_count(size_bytes: int) -> int:
    """PUT requests to upload an object: one, or multipart create + parts + complete."""
    if size_bytes <= MULTIPART_THRESHOLD:
        return 1
    return 2 + -(-size_bytes // MULTIPART_PART_SIZE)
