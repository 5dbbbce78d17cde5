"""The old home of the WAL operations, split by what they hold (issue 12 item 1):

- walctl.wal.lifecycle: init, open a writer, trim, the readers' open;
- walctl.wal.crash_repair: repairing a crashed writer's damage (FORMATS.md 1.4 "sealing");
- walctl.wal.verdict: the findings a crash does not explain, and recover's engine.

The names the commands, the pipelines and the tests import from here stay importable.
"""

from __future__ import annotations

from walctl.wal.lifecycle import (InitResult, OpenedWAL, RecoverSession, TrimResult, init_wal, open_reader,
                                  open_writer, read_wal_state, trim_scanned, trim_wal,
                                  trusted_checkpoint)

__all__ = ["InitResult", "OpenedWAL", "RecoverSession", "TrimResult", "init_wal", "open_reader", "open_writer",
           "read_wal_state", "trim_scanned", "trim_wal", "trusted_checkpoint"]
