"""Upload: the WAL's records into objects in the store, a commit, then the WAL's trim.

One room a job (each module's docstring says more):

    run.py        upload(), check_wal(), the lease: the steps in order over one device handle
    state.py      the options and the state one pass hands from step to step
    scanindex.py  the records as the scan reads them: skipped, bad or to upload; overlaps, gaps
    judge.py      what the scan found that stops the upload (damage, another WAL, gaps)
    plan.py       Segments, the objects they become (plan_objects), UploadResult
    blocks.py     DataBlocks laid out as the batches arrive (record/batch packing: walctl/format/)
    spool.py      one-pass uploads: blocks written to the store by a thread as the scan reads
    walread.py    the second read of the WAL, for objects not written during the scan
    commit.py     prepare the ids, write the objects, make them live; or roll back
    handoff.py    the trim after the commit (directly or through the running writer)
    background.py the writer-side uploader (append --upload-at)

The names below load their module on first use, so ``walctl upload`` never loads the writer-side
uploader, and a dry run or an S3 upload never loads the spool. Tunables (KEEP_SCANNED_BYTES,
SPOOL_*, CHUNK_READ_BYTES, ...) are read from the module that uses them: set them there.
"""

from walctl.lazynames import module_getattr

_HOMES = {
    "upload": "run", "check_wal": "run", "UploadBusy": "run", "DEFAULT_TRIM_TIMEOUT_S": "run", "LEASE_WAIT_S": "run",
    "Segment": "plan", "PlannedObject": "plan", "UploadResult": "plan", "plan_objects": "plan",
    "upload_mark": "scanindex",
    "BackgroundUploader": "background", "BackgroundStats": "background", "DEFAULT_UPLOAD_AT": "background",
    "UPLOAD_POLL_S": "background",
}
__all__ = sorted(_HOMES)
__getattr__ = module_getattr(__name__, _HOMES, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
