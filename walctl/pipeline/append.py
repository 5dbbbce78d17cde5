"""Where an append continues a stream: the engine side of ``walctl append`` that needs both the
WAL (its checkpoint or the open's scan) and, for a stream no longer in it, the store's manifest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from walctl.defaults import DEFAULT_IODEPTH, FILE_IODEPTH
from walctl.errors import UsageError


def first_base_offset(opened, stream_id: int, base_offset: int | None, *, device: str, store_url: str | None,
                      endpoint_url: str | None = None, on_warning: Callable[[str], None] | None = None,
                      s3=None) -> int:
    """The stream offset of the first record ``walctl append`` writes to ``stream_id``.

    ``base_offset`` when given; else the stream's end in the log (``opened``: walctl.wal.lifecycle
    open_writer's result); else, with ``store_url``, its end in the store's manifest (0 for a new
    stream or a store that does not exist yet: ``on_warning`` says so; the store is never created);
    else 0 when the log never held the stream. ``s3``: open_store's S3 settings (--retry-for ...).

    Raises:
        UsageError: the stream's records were trimmed and neither a store nor a base offset was given.
    """
    if base_offset is not None:
        return base_offset
    checkpoint = opened.checkpoint  # the log's stream ends, from its checkpoint or the open's scan
    ends = checkpoint.streams if checkpoint is not None else {}
    if stream_id in ends:
        return ends[stream_id]
    if store_url is not None:
        # Not in the WAL (uploaded and trimmed, or the WAL is new): the store knows the stream.
        from walctl.store import manifest, open_store, store_exists

        # append only reads the store: it never creates it
        st = open_store(store_url, endpoint_url=endpoint_url, create=False, missing_ok=True, s3=s3)
        if not store_exists(st):
            if on_warning is not None:
                on_warning(f"{store_url}: the store does not exist yet, so stream {stream_id} starts at offset 0")
            return 0
        if not manifest.manifest_numbers(st):
            if on_warning is not None:  # a wrong directory would restart a stream the real store holds
                on_warning(f"{store_url}: no manifest (not a walctl store, or nothing uploaded yet), so stream "
                           f"{stream_id} starts at offset 0")
            return 0
        known = manifest.load_latest(st).stream(stream_id)
        return known.end if known else 0
    if opened.header.trim_offset < 0 or (checkpoint is not None and checkpoint.complete):
        return 0  # the log has never held this stream (and no store named): the stream is new
    raise UsageError(f"stream {stream_id} has no record left in the WAL after trimming", where=device,
                     hint="pass --store (where it was uploaded) or --base-offset with the stream's next offset")


# ---- the append run (issue 29: the loop that ``walctl append`` ran itself) ----------------------

DEFAULT_FULL_WAIT_UPLOADING_S = 120.0  # --full-wait with --upload-at: longer than a store's --retry-for
FULL_NOTE_EVERY_S = 10.0  # at most one "held back" note per this many seconds


@dataclass
class AppendRequest:
    """What ``walctl append`` asks: where, which records (``data`` payloads, or ``input_path``
    framed per ``framing``: "lines", "length-prefixed" or "raw"), from which stream offset, and
    the writer's and the background's options."""

    device: str
    stream_id: int
    data: list[bytes] | None = None
    input_path: str | None = None
    framing: str = "lines"
    base_offset: int | None = None
    store: str | None = None
    endpoint_url: str | None = None
    iodepth: int | None = None  # None: DEFAULT_IODEPTH, or FILE_IODEPTH for a regular file's input
    iops: float | None = None
    bandwidth: float | None = None
    upload_at_bytes: int | None = None
    batch_interval_s: float | None = None
    full_wait_s: float | None = None
    s3: Any = None


@dataclass
class AppendHooks:
    """How the run talks: acknowledgements (the writer's callbacks, set before the first record),
    ``check()`` between packings (raises a pending interrupt; True: stop taking input), warnings
    and the ring-full note, and ``summarize(run)`` for the summary an error carries."""

    on_acks: Callable | None = None
    on_frames: Callable | None = None
    render: int = 0  # frame_pack's render for on_frames (framepack.RENDER_*)
    check: Callable[[], bool] = lambda: False
    on_warning: Callable[[str], None] = lambda message: None
    on_note: Callable[[str], None] = lambda message: None
    summarize: Callable[["AppendRun"], dict] | None = None


@dataclass
class AppendRun:
    """What a run did: the writer (its counters), the open's result, the budget, the background,
    the next stream offset, and the appender's own stages (walctl.wal.feed.FeedStats)."""

    writer: Any
    opened: Any
    budget: Any
    listener: Any = None
    uploader: Any = None
    next_base: int = 0  # the stream offset after the last acknowledged record: where a producer resumes
    first_base: int | None = None  # the run's first record's stream offset, once known
    started: float = 0.0
    seconds: float = 0.0
    device_bytes_read: int = 0
    feed: Any = None


def append(request: AppendRequest, hooks: AppendHooks) -> AppendRun:
    """Append the request's records durably (each acknowledged through ``hooks`` once its block
    and every earlier one is durable); close the writer cleanly, also on SIGTERM/SIGINT (queued
    records still become durable). Errors carry ``hooks.summarize(run)`` as their summary."""
    import time

    from walctl.device.blockio import bytes_read_total
    from walctl.errors import WalctlError
    from walctl.wal.feed import FeedStats, open_source

    source = open_source(request.input_path) if request.input_path is not None else None
    started, read_before = time.monotonic(), bytes_read_total()
    try:
        run = _open(request, hooks, _iodepth(request, source))
    except BaseException:
        if source is not None:
            source.close()
        raise
    run.started, run.feed = started, FeedStats()

    def finish() -> None:
        run.seconds = time.monotonic() - started
        run.device_bytes_read = bytes_read_total() - read_before

    try:
        _feed(request, hooks, run, source)
        run.writer.close()
    except BaseException as exc:  # SIGTERM/SIGINT or an error: every record taken is made durable first
        _close_after(run.writer)
        if run.first_base is not None:  # the feed stopped mid-way: the next offset is after what is durable
            run.next_base = run.first_base + run.writer.records_acked
        finish()
        if hooks.summarize is not None:
            exc.summary = hooks.summarize(run)
        if isinstance(exc, WalctlError) and exc.where is None:
            raise exc.at(request.device)
        raise
    finally:
        if source is not None:
            source.close()
    finish()
    return run


def _iodepth(request: AppendRequest, source) -> int:
    """The writer's queue depth: the request's, else FILE_IODEPTH for a regular file's input (the producer
    never waits: a deeper queue keeps more bytes in flight), else DEFAULT_IODEPTH."""
    if request.iodepth is not None:
        return request.iodepth
    return FILE_IODEPTH if source is not None and source.direct else DEFAULT_IODEPTH


def _open(request: AppendRequest, hooks: AppendHooks, iodepth: int) -> AppendRun:
    """The writer opened (a crashed writer's window sealed), its callbacks and background started."""
    from walctl.wal.lifecycle import open_writer
    from walctl.wal.pacing import Budget

    budget = Budget.from_options(request.iops, request.bandwidth)
    opened = open_writer(request.device, need_stream=request.stream_id if request.base_offset is None else None,
                         iodepth=iodepth, on_ack=None, budget=budget,
                         batch_interval_s=request.batch_interval_s, on_trim_wait=hooks.on_warning)
    for message in opened.warnings:
        hooks.on_warning(message)
    if opened.sealed_ranges:
        from walctl import sizes

        hooks.on_warning(f"{request.device}: the last writer did not close cleanly; sealed "
                         f"{sizes.plural(opened.sealed_ranges, 'damaged range')} "
                         f"of its last window before appending")
    writer = opened.writer
    writer.on_acks, writer.on_frames = hooks.on_acks, hooks.on_frames
    listener, uploader = _start_background(request, writer, hooks)
    return AppendRun(writer, opened, budget, listener, uploader)


def _feed(request: AppendRequest, hooks: AppendHooks, run: AppendRun, source) -> None:
    """The records, from the stream's next offset: the C path for framed input, else payloads."""
    from walctl import bounds
    from walctl.format import framepack
    from walctl.wal.feed import feed_frames
    from walctl.wal.writer_blocks import FrameSpec

    writer = run.writer
    run.next_base = first_base_offset(run.opened, request.stream_id, request.base_offset, device=request.device,
                                      store_url=request.store, endpoint_url=request.endpoint_url,
                                      on_warning=hooks.on_warning, s3=request.s3)
    run.first_base = run.next_base
    epoch = max(writer.header.epoch, 0)
    if request.data:
        bounds.base_offset(run.next_base, count=len(request.data), option="stream offset")
    else:  # input: its first record's offset (the loops check the next ones); nothing is read before
        bounds.base_offset(run.next_base, option="stream offset")
    base_limit, payload_limit = _limits()
    # A record never outgrows the WAL's largest (issue 30): input without a record end in sight
    # (/dev/zero, a line longer than the ring, a garbage length prefix) stops there, exit 2.
    wal_limit = largest_payload(writer)
    if request.data is None:
        payload_limit = min(payload_limit, wal_limit)
    if request.data is None and request.framing != "raw" and framepack.AVAILABLE and hooks.on_frames is not None:
        spec = FrameSpec(request.framing == "lines", request.stream_id, epoch, payload_limit, hooks.render)
        end = feed_frames(writer, source, spec, run.next_base, base_limit, hooks.check, run.feed)
        run.next_base = end.next_base
        # The records before one out of bounds are queued (made durable at the close); then why it stopped.
        if end.stop == framepack.STOP_TOO_LARGE:
            _too_large(end.next_len, wal_limit, request.framing)
        if end.stop == framepack.STOP_MAX:
            bounds.base_offset(run.next_base, option="stream offset")
    else:
        batches = _payload_batches(request.data, source, request.framing, payload_limit)
        run.next_base = _feed_payloads(writer, _bounded(batches, wal_limit, request.framing),
                                      request.stream_id, epoch, run.next_base, (base_limit, payload_limit),
                                      hooks.check)


def largest_payload(writer) -> int:
    """The largest payload one record of this WAL holds: its record (with the batch header) fits
    the ring and a write window (walctl.wal.writer_blocks' placement check)."""
    from walctl.wal.writer_blocks import MANY_OVERHEAD

    return max(0, (min(writer.ring.size, writer.window_cap_bytes) & ~4095) - MANY_OVERHEAD)


def _too_large(length: int, wal_limit: int, framing: str) -> None:
    """Refuse a record of ``length`` bytes (or more: its end was not read) over the WAL's largest."""
    from walctl import bounds
    from walctl.errors import UsageError

    if length <= wal_limit:
        bounds.record_payload(length)
        return
    cut = {"lines": "a line of the input is longer: is it text with newlines?",
           "length-prefixed": "a length prefix asks for more: is the input length-prefixed?",
           "raw": "the whole input is one record with --framing raw"}.get(framing, "")
    raise UsageError(f"record of {length} bytes or more is larger than this WAL's largest record "
                     f"({wal_limit} bytes); nothing of it was written",
                     hint=f"{cut} Records before it are appended; a larger record needs a larger WAL "
                          f"(walctl init --capacity)")


def _bounded(batches, wal_limit: int, framing: str):
    """The payload batches, refusing (after the ones before) a payload over the WAL's largest record."""
    for payloads, lengths in batches:
        if lengths and max(lengths) > wal_limit:
            keep = next(i for i, n in enumerate(lengths) if n > wal_limit)
            if keep:
                yield payloads[:keep], lengths[:keep]
            _too_large(lengths[keep], wal_limit, framing)
        yield payloads, lengths


def _limits() -> tuple[int, int]:
    """(largest base offset, largest payload) the append loop takes (bounds.base_offset, bounds.record_payload)."""
    from walctl import bounds
    from walctl.format import batch as batch_format
    from walctl.format import record as rec

    return bounds.OFFSET_END_LIMIT - 2, min(bounds.UINT32_MAX, rec.MAX_BODY_LENGTH) - batch_format.HEADER_SIZE


def _payload_batches(data, source, framing: str, limit: int | None = None):
    """(payloads, their lengths) in batches: the DATA arguments, or per read of the input (one for raw)."""
    from walctl.wal.framing import Framing, batches

    if data:
        yield data, [len(p) for p in data]
        return
    stream = source.stream
    if framing == "raw":
        payload = _read_at_most(stream, limit + 1) if limit is not None else (
            stream.readall() if hasattr(stream, "readall") else stream.read())
        yield [payload], [len(payload)]
        return
    for view, spans in batches(stream, Framing(framing)):
        flat = spans.spans[:2 * spans.count].tolist()
        starts, lengths = flat[0::2], flat[1::2]
        # Slices of the read's bytes (copies: a bytes slice costs a third of a memoryview slice,
        # and the record's bytes are copied once more into the block anyway).
        buf = view.obj if type(view.obj) is bytes else view
        yield list(map(buf.__getitem__, map(slice, starts, map(int.__add__, starts, lengths)))), lengths


def _read_at_most(stream, n: int) -> bytes:
    """Up to ``n`` bytes of ``stream`` (fewer only at its end)."""
    parts, left = [], n
    while left > 0:
        part = stream.read(min(left, 1 << 20))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _feed_payloads(writer, batches, stream_id: int, epoch: int, next_base: int,
                   limits: tuple[int, int], check: Callable[[], bool]) -> int:
    """Append each batch's payloads (``batches``: (payloads, their lengths)) as records of
    ``stream_id`` from stream offset ``next_base``; returns the next stream offset.
    ``limits``: (largest base offset, largest payload). Stops early when ``check()`` says so.

    Raises:
        UsageError: a payload or a stream offset out of bounds, once the records before are queued.
    """
    from walctl import bounds

    base_limit, payload_limit = limits
    for payloads, lengths in batches:
        taken = _within_bounds(payloads, lengths, next_base, base_limit, payload_limit)
        token, i = (taken, next_base), 0
        stopped = False
        while i < len(taken) and not stopped:
            queued = writer.append_many(taken, stream_id, epoch, next_base, token, index=i)
            i, next_base = i + queued, next_base + queued
            stopped = check()
        if stopped:
            break
        if i < len(payloads):
            # The records counted so far are queued; the one that would overflow is not written.
            if not 0 <= next_base <= base_limit:
                bounds.base_offset(next_base, option="stream offset")
            bounds.record_payload(lengths[i])
    return next_base


def _within_bounds(payloads: list, lengths: list, next_base: int, base_limit: int, payload_limit: int) -> list:
    """The leading payloads of a batch that bounds.base_offset and bounds.record_payload let through:
    the records before the first out of range are written, then its error is raised."""
    n = len(payloads)
    stop = n if 0 <= next_base and next_base + n - 1 <= base_limit else max(0, base_limit + 1 - next_base)
    if max(lengths) > payload_limit:
        stop = min(stop, next(i for i, length in enumerate(lengths) if length > payload_limit))
    return payloads if stop == n else payloads[:stop]


def _start_background(request: AppendRequest, writer, hooks: AppendHooks):
    """(listener, uploader): the trim hand-off socket, and with --upload-at the writer-side uploader;
    each stopped by the writer's close (the uploader first: a running upload commits and trims).
    A full ring then holds appends back for them (``full_wait_s``, --full-wait)."""
    from walctl.wal.handoff import start_listener

    # Trims from another process (walctl upload, walctl trim) reach this writer through its
    # hand-off socket while it holds the lock (FORMATS.md 1.7).
    listener = start_listener(request.device, writer)
    uploader = None
    if request.upload_at_bytes is not None:
        from walctl.pipeline.upload import BackgroundUploader
        from walctl.store import open_store

        try:
            # Capped at half the ring: an upload must be able to run while the other half fills.
            threshold = min(request.upload_at_bytes, writer.ring.size // 2)
            uploader = BackgroundUploader(request.device, open_store(request.store, endpoint_url=request.endpoint_url,
                                                                     s3=request.s3),
                                          writer, threshold, on_warning=hooks.on_warning)
        except BaseException:
            if listener is not None:
                listener.close()
            writer.close()
            raise
        writer.before_close.append(uploader.stop)  # finish a running upload (commit + trim) first
    if listener is not None:
        writer.before_close.append(listener.close)
    _hold_back_when_full(request, writer, uploader, hooks.on_note)
    return listener, uploader


def _hold_back_when_full(request: AppendRequest, writer, uploader, on_note: Callable[[str], None]) -> None:
    """Backpressure: a full ring holds appends back (``--full-wait``) until a trim frees room,
    saying (``on_note``) what it waits for, instead of failing with exit 7 at once."""
    import time

    full_wait_s = request.full_wait_s
    if full_wait_s is None:
        full_wait_s = DEFAULT_FULL_WAIT_UPLOADING_S if uploader is not None else 0.0
    noted = [-FULL_NOTE_EVERY_S]
    who = ("this writer's background upload (--upload-at) trims it" if uploader is not None
           else "'walctl upload' or 'walctl trim' (the trim hand-off) trims it")

    def on_full(waiting: bool) -> None:
        now = time.monotonic()
        if waiting and now - noted[0] >= FULL_NOTE_EVERY_S:
            noted[0] = now
            on_note(f"walctl: {request.device}: WAL full: appends held back until {who} (exit 7 if nothing frees "
                    f"room for {full_wait_s:g} s)")

    def why() -> str:
        if uploader is None:
            return "no uploader is running"
        stats = uploader.stats
        if stats.failures:  # an error's text may be empty (str(RuntimeError())): it is failing all the same
            return f"the background upload is failing: {stats.last_error or 'an error without a message'}"
        return "the background upload freed no room in that time"

    writer.full.wait_s, writer.full.on_full, writer.full.why = full_wait_s, on_full, why


def _close_after(writer) -> None:
    """On an error, still make every queued record durable and acknowledged if the device allows."""
    try:
        writer.close()
    except Exception:
        writer.abort()
