"""What an executor runs: one task's iterations (their specs are plain, picklable data).

A task reads its iteration's source ranges with the plan's GETs (walctl.spark.readahead, over walctl.device.prefetch),
assembles the iteration's pieces (blocks copied verbatim, each checked against its index entry)
and uploads each: a whole object with one PUT, or the next part of a multipart object (the store's
put_part). Each piece's data CRC comes back alone; the driver (walctl.spark.job) combines them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from walctl.device.pacing import Pacer  # one pacer for every budget
from walctl.errors import NotFoundError, WalctlError
from walctl.failpoints import failpoint
from walctl.spark.readahead import READ_THREADS, TaskReads

if TYPE_CHECKING:
    from walctl.store.base import Store


@dataclass(frozen=True)
class PieceSpec:
    key: str  # the output object's key (its prepared id's)
    piece: object  # walctl.compaction.plan.Piece
    upload_id: str | None  # the multipart upload this piece is a part of; None: the whole object, one PUT
    data_bytes: int  # the object's whole data region (where its index starts)
    index: bytes | None  # an object of one piece: its IndexBlock (the driver adds a multipart object's)


@dataclass(frozen=True)
class IterationSpec:
    store_url: str
    endpoint_url: str | None
    index: int
    reads: tuple  # walctl.compaction.plan.Read, the iteration's GETs
    pieces: tuple[PieceSpec, ...]
    read_rate_bps: float | None = None  # this task's share of the read budget, bytes/s; None = unlimited
    write_rate_bps: float | None = None  # this task's share of the write budget, bytes/s; None = unlimited
    read_threads: int = READ_THREADS  # GETs in flight at most (INFLIGHT_READ_BYTES bounds their bytes)
    memory_bytes: int | None = None  # the task's memory share (the plan's task_memory); None: its largest iteration
    progress_path: str | None = None  # a local master's: a line "<iteration> <bytes>" appended per iteration done


def tell_progress(spec: IterationSpec, written: int) -> None:
    """Append "<iteration> <bytes written>" to the driver's progress file (a local master's: the
    driver reads it for its per-iteration progress); never fails the task."""
    if spec.progress_path is None:
        return
    try:
        fd = os.open(spec.progress_path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, f"{spec.index} {written}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def open_task_store(url: str, endpoint_url: str | None):
    """The store as an executor opens it: a local store directory must exist there (never created)."""
    from urllib.parse import unquote, urlsplit

    from walctl.store import open_store

    if url.startswith("file://") or "://" not in url:
        path = unquote(urlsplit(url).path) if url.startswith("file://") else url
        if not os.path.isdir(path):
            raise NotFoundError("no such store directory", where=path)
    return open_store(url, endpoint_url=endpoint_url, create=False)


def run_iteration(spec: IterationSpec) -> dict:
    """One iteration as an executor runs it (errors in the result, classified)."""
    return run_iterations_in_task([spec])[0]


def _error_result(index: int, exc: BaseException) -> dict:
    if isinstance(exc, WalctlError):
        return {"iteration": index, "error": {"type": type(exc).__name__, "exit_code": exc.exit_code,
                                              "what": exc.what, "where": exc.where, "hint": exc.hint}}
    return {"iteration": index, "error": {"type": "ModuleNotFoundError", "exit_code": 4, "what": str(exc),
                                          "where": None, "hint": None, "module": getattr(exc, "name", None)}}


def run_iterations_in_task(specs) -> list[dict]:
    """Runs on an executor: one task's iterations with one store client, their GETs read ahead
    of the writes (ReadAhead) within the task's memory share. Each result has that iteration's
    own request counts. Errors come back in the result (``error``), classified, not raised;
    the task stops at its first."""
    entered = time.time()
    entry_cpu = sum(os.times()[:2])  # the worker's start and the task's unpickling, CPU seconds
    specs = list(specs)
    out: list[dict] = []
    if not specs:
        return out
    ahead = None
    try:
        store = open_task_store(specs[0].store_url, specs[0].endpoint_url)
        ahead = TaskReads(store, specs)
        for k, spec in enumerate(specs):
            try:
                out.append(_run_iteration(spec, store, ahead, k))
                tell_progress(spec, out[-1].get("bytes_written", 0))
            except (WalctlError, ImportError) as exc:
                out.append(_error_result(spec.index, exc))
                break
    except (WalctlError, ImportError) as exc:
        out.append(_error_result(specs[len(out)].index, exc))
    finally:
        if ahead is not None:
            ahead.close()
    cpu, started = os.times(), process_started()
    for result in out:  # where the task's time went before its first GET (bench/compact_bench.py)
        result.update(worker_started=started, task_entered=entered,
                      worker_cpu=cpu.user + cpu.system, entry_cpu=entry_cpu)
    return out


def process_started() -> float | None:
    """This process's start, wall clock (Linux /proc: its start in clock ticks after boot, against
    the uptime now; /proc/stat's boot time is whole seconds), None elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


_HOLD_GIL = None


def _hold_gil(crc32c) -> dict:
    """crc32c's keyword to keep the GIL (the crc32c package's gil_release_mode=0), {} if it has none."""
    global _HOLD_GIL
    try:
        crc32c(b"", 0, gil_release_mode=0)
        _HOLD_GIL = {"gil_release_mode": 0}
    except TypeError:
        _HOLD_GIL = {}
    return _HOLD_GIL


def _run_iteration(spec: IterationSpec, store: Store, ahead: TaskReads, k: int) -> dict:
    started = time.monotonic()
    before = store.stats.snapshot()  # the reads ahead touch only the get counters, never the put ones
    run = _IterationWrites(spec, store, ahead, k)
    # One piece is written (its syscalls release the GIL) while the next one is checked and summed.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="walctl-write") as writer:
        run.write_pieces(writer)
    run.drain_unused()
    after = store.stats.snapshot()
    stats = {key: after.get(key, 0) - before.get(key, 0) for key in after}
    first, last, wall = ahead.spans[k]
    return {"iteration": spec.index, "gets": len(spec.reads),
            "puts": stats["put"] + stats.get("multipart_parts", 0),
            "bytes_read": ahead.bytes[k], "bytes_written": stats["bytes_written"],
            "seconds": time.monotonic() - started, "read_seconds": (last - first) if first is not None else 0.0,
            "read_started": wall if wall is not None else time.time(), "finished": time.time(),
            "pieces": run.parts}


class _IterationWrites:
    """One iteration's pieces: assembled from the read buffers (each block checked against its
    index entry, summed), written one by one while the next is assembled, paced, and each read's
    buffer given back as soon as no piece still to write needs it."""

    def __init__(self, spec: IterationSpec, store: Store, ahead: TaskReads, k: int):
        from walctl.format.crc import crc32c

        self.spec, self.store, self.ahead, self.k = spec, store, ahead, k
        self.writes = Pacer.bytes_per_s(spec.write_rate_bps)
        self.futures = ahead.futures[k]
        self.buffers: dict[int, bytes] = {}
        self.parts: list[dict] = []
        self.range_crcs: dict[int, list[int]] = {}  # piece -> its source ranges' crcs
        self._locate()
        # A local store's reads land in the task's arena, and its writes take each chunk before asking
        # for the next (put_large, put_part): a read's extent goes back to the reads waiting as soon as
        # its last chunk is written, not when the whole piece is (which held the next iteration's reads
        # back until then: reading and writing took turns). Elsewhere the reads are bytes objects that
        # the write holds until it is done: they are given back with the piece.
        self.progressive = ahead.buffers is not None
        self.released: set[int] = set()
        # Ranges are ~100 KB: summed in microseconds with the GIL held, where releasing it and waiting
        # to get it back from the read threads costs several times more (crc32c's gil_release_mode).
        self.hold_gil = _HOLD_GIL if _HOLD_GIL is not None else _hold_gil(crc32c)

    def _locate(self) -> None:
        """Where each source range's bytes are (per piece: read, offset in it), which reads each
        piece takes bytes from, and how many pieces still need each read's buffer."""
        spec = self.spec
        located = {}
        for n, read in enumerate(spec.reads):
            for r in read.ranges:
                located[r] = (n, r.position - read.start)
        self.places = [[(*located[r], r) for r in p.piece.ranges] for p in spec.pieces]
        self.sources = [sorted({n for n, _, _ in where}) for where in self.places]
        self.uses = [0] * len(spec.reads)
        self.last_piece = {}
        for i, needed in enumerate(self.sources):
            for n in needed:
                self.uses[n] += 1
                self.last_piece[n] = i
        self.unused = [n for n, count in enumerate(self.uses) if count == 0]

    def release(self, n: int) -> None:
        self.released.add(n)
        self.ahead.release(self.spec.reads[n].size, (self.k, n))

    def feed(self, chunks: list, releases: dict):
        """The piece's chunks, one at a time; once chunk j is written (the next one asked for), the
        reads whose last chunk it was are given back."""
        for j, chunk in enumerate(chunks):
            yield chunk
            for n in releases.get(j, ()):
                self.release(n)

    def buffer(self, n: int) -> bytes:
        if n not in self.buffers:
            self.buffers[n] = self.futures[n].result()  # a failed GET raises its error here
            self.futures[n] = None  # a done future keeps its result: the buffer must go with its last piece
        return self.buffers[n]

    def write(self, p: PieceSpec, chunks, size: int):
        if p.upload_id is None:
            self.store.put_large(p.key, chunks)
            return None
        return self.store.put_part(p.key, p.upload_id, p.piece.part, chunks, p.piece.position, size=size)

    def finish(self, pending) -> None:
        """A piece's write done: its record, the pace, and the buffers no later piece needs."""
        future, p, crc, size, needed, i = pending
        part = future.result()  # a failed write raises its error here
        self.writes.paid(size)
        for n in needed:
            self.uses[n] -= 1
            if self.uses[n] == 0:
                del self.buffers[n]  # memory follows the pieces still to write
                if n not in self.released:
                    self.release(n)
        self.parts.append({"output": p.piece.output, "part": p.piece.part, "crc": crc,
                           "bytes": p.piece.data_bytes, "record": part,
                           "range_crcs": self.range_crcs.pop(i)})
        failpoint("compact-task-after-piece")  # (on the executor: tests lose it, or hang it, mid-job)

    def assemble(self, i: int, p: PieceSpec) -> tuple[list, dict[int, int], int]:
        """Piece ``i``'s chunks (views of the read buffers, then its tail if it is a whole object),
        the reads whose last chunk is here (read -> chunk), and its data CRC (this piece's alone:
        pieces of one object run in any order, the driver combines them)."""
        from walctl.format.crc import crc32c, crc32c_combine
        from walctl.format.object import VERSION_WALCTL, Footer, IndexEntry, iter_placed

        chunks: list = []
        last_chunk: dict[int, int] = {}
        crc = 0
        range_crcs = self.range_crcs[i] = []  # per source range, for the manifest's per-range crcs
        for j, (n, at, r) in enumerate(self.places[i]):
            if self.progressive and self.last_piece[n] == i:
                last_chunk[n] = j
            view = memoryview(self.buffer(n))[at:at + r.size]
            # A misplaced read must never be published as data: decode the blocks against their
            # entry (the batches' payloads as views: the buffer never changes, nothing is copied).
            for _ in iter_placed(view, IndexEntry(r.stream_id, r.start_offset, r.end_offset - r.start_offset,
                                                  r.record_count, 0, r.size), copy=False):
                pass
            range_crcs.append(crc32c(view, **self.hold_gil))
            crc = crc32c_combine(crc, range_crcs[-1], r.size)
            chunks.append(view)
        if p.index is not None:  # an object of one piece: its IndexBlock and Footer follow
            footer = Footer(p.data_bytes, len(p.index), VERSION_WALCTL, crc32c(p.index), crc)
            chunks += [p.index, footer.encode()]
        return chunks, last_chunk, crc

    def write_pieces(self, writer: ThreadPoolExecutor) -> None:
        pending = None
        for i, p in enumerate(self.spec.pieces):
            chunks, last_chunk, crc = self.assemble(i, p)
            size = sum(len(c) for c in chunks)
            if pending is not None:
                self.finish(pending)
            body = chunks
            if last_chunk:
                releases: dict[int, list[int]] = {}
                for n, j in last_chunk.items():
                    releases.setdefault(j, []).append(n)
                body = self.feed(chunks, releases)
            pending = (writer.submit(self.write, p, body, size), p, crc, size, self.sources[i], i)
            del chunks, body  # the chunks hold the views: a buffer goes when the last piece using it is written
        if pending is not None:
            self.finish(pending)

    def drain_unused(self) -> None:
        """A GET no piece uses (none in a plan): wait for it, give its memory back."""
        for n in self.unused:
            self.futures[n].result()
            self.futures[n] = None
            self.ahead.release(self.spec.reads[n].size, (self.k, n))
