"""Upload's run state: the options an upload was given, and what one pass over the WAL hands from
step to step (run.py's scan, judge.py, the plan, the commit, the trim).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from walctl.pipeline.upload.plan import UploadResult

if TYPE_CHECKING:
    from walctl.device.base import Device

    from walctl.pipeline.upload.scanindex import _Records
    from walctl.store import manifest as mf
    from walctl.store.base import Store


@dataclass(frozen=True)
class Options:
    """upload()'s options, as given."""

    namespace: str
    block_size: int
    split_size: int
    trim: bool
    dry_run: bool
    accept_gaps: tuple
    progress: object
    trim_timeout_s: float
    max_bytes: int | None
    salvage: bool = False  # walctl salvage: read past damage, its lost ranges become gaps (salvage.py)


class UploadRun:
    """One pass of an upload over the WAL: its options, the open handle, and what each step hands
    the next (the header and manifest, the scan's records, the plan, the result)."""

    def __init__(self, wal_path: str, store: Store, opts: Options, spools, live: bool | None, dev: Device,
                 started: float):
        self.wal_path, self.store, self.opts, self.dev, self.started = wal_path, store, opts, dev, started
        self.spools = spools  # spool._Spools: objects written as the scan reads (or None)
        self.live = live  # a live writer's log (None: not known yet, the scan looks)
        self.result = UploadResult(dry_run=opts.dry_run)
        self.header = None
        self.doc: mf.Manifest | None = None
        self.node_key = ""
        self.mark: dict | None = None  # the WAL's upload mark in the manifest
        self.scan = None  # walctl.wal.reader.ScanResult
        self.records: _Records | None = None
        self.findings: list = []
        self.streams: dict = {}  # stream -> its first Segment
        self.after_gaps: list = []  # (stream, Segment) after a gap inside the WAL
        self.plan: list = []
        self.last_mark: dict | None = None  # upload mark of the last record to upload
        self.state = None  # the header slots' HeaderState the scan started from
        self.damage: list = []  # (salvage) the corrupt findings the scan read past
