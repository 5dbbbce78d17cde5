"""Where an append continues a stream: the engine side of ``walctl append`` that needs both the
WAL (its checkpoint or the open's scan) and, for a stream no longer in it, the store's manifest."""

from __future__ import annotations

from typing import Callable

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
