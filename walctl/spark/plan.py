"""Moved: the compaction plan lives in walctl.compaction (plan, planner, coverage).

Kept only for walctl/pipeline/check.py's imports, until it imports from walctl.compaction.
"""

from walctl.compaction.coverage import check_overlaps as _check_overlaps
from walctl.compaction.coverage import manifest_intervals as _manifest_intervals
from walctl.compaction.plan import SourceRange
from walctl.compaction.planner import source_ranges as _source_ranges

__all__ = ["SourceRange", "_check_overlaps", "_manifest_intervals", "_source_ranges"]
