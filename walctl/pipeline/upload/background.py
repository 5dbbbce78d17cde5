"""Writer-side upload (``walctl append --store URL --upload-at SIZE``): a thread in the writer's
process that runs upload() each time enough acknowledged log lies past the trim point, then trims
through the writer itself. Loaded only by append (never by ``walctl upload``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from walctl.errors import UsageError
from walctl.pipeline.upload.run import UploadBusy, upload

if TYPE_CHECKING:
    from walctl.pipeline.upload.plan import UploadResult
    from walctl.store.base import Store

DEFAULT_UPLOAD_AT = 512 << 20  # AutoMQ's default: upload once this much of the WAL is not yet uploaded
UPLOAD_POLL_S = 0.05  # how often the background uploader looks at the writer's acknowledged end


@dataclass
class BackgroundStats:
    uploads: int = 0
    records: int = 0
    objects: int = 0
    failures: int = 0
    last_error: str | None = None

    def to_json(self) -> dict:
        return {"uploads": self.uploads, "records": self.records, "objects": self.objects,
                "failures": self.failures, "last_error": self.last_error}


class BackgroundUploader:
    """Writer-side upload (AutoMQ's broker does the same): from inside the writer's process, each
    time ``upload_at`` bytes of acknowledged log lie past the trim point, upload them, commit, and
    trim through the writer itself. Appends and acknowledgements never wait for it.

    Crash safety is upload()'s: a kill at any moment leaves prepared ids (gc) or a commit whose
    records a rerun of ``walctl upload`` skips; the trim follows the commit.
    """

    def __init__(self, wal_path: str, store: Store, writer, upload_at: int, *, on_warning=None, **upload_options):
        import threading

        self.wal_path = wal_path
        self.store = store
        self.writer = writer
        self.upload_at = upload_at
        self.options = upload_options
        self.on_warning = on_warning
        self.stats = BackgroundStats()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="walctl-uploader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Let a running upload finish (its commit and trim), then stop."""
        self._stop.set()
        self._thread.join()

    def pending_bytes(self) -> int:
        return self.writer.acked_end - max(self.writer.header.trim_offset, 0)

    def _loop(self) -> None:
        while not self._stop.wait(UPLOAD_POLL_S):
            if self.pending_bytes() < self.upload_at:
                continue
            try:
                self.upload_once()
            except UploadBusy:  # a 'walctl upload' of this WAL is running: it uploads (and trims) for us
                continue
            except Exception as exc:  # the writer goes on; the next round (or walctl upload) retries
                self.stats.failures += 1
                self.stats.last_error = str(exc)
                if self.on_warning is not None:
                    self.on_warning(f"{self.wal_path}: background upload failed ({exc}); retrying later")
                self._stop.wait(1.0)

    def upload_once(self) -> UploadResult:
        # Each upload takes at most upload_at bytes: one object per upload_at, as documented, and a
        # writer held back by a full ring gets room back after one upload, not after the whole log.
        result = upload(self.wal_path, self.store, trim=False, max_bytes=self.upload_at, lease_wait_s=0.0,
                        **self.options)
        self.stats.uploads += 1
        self.stats.records += result.records
        self.stats.objects += len(result.objects)
        if result.last_offset is not None and result.last_offset > self.writer.header.trim_offset:
            deadline = time.monotonic() + 5.0
            while True:
                try:
                    self.writer.trim_to(result.last_offset, uploaded=True)
                    break
                except UsageError:
                    # durable (upload read it) but its acknowledgement is a moment behind
                    if time.monotonic() > deadline or result.last_offset < self.writer.header.trim_offset:
                        raise
                    time.sleep(0.01)
            result.trimmed_to = result.last_offset
        return result
