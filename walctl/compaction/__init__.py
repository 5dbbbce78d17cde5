"""Compaction without Spark: Stream Object compaction and Force Split by server-side copy.

SSO compaction (level 1, ``walctl.spark``) reads blocks and re-uploads them. The levels here
never hold object data: ``so`` merges consecutive Stream Objects of a stream, ``split``
splits Stream Set Objects into Stream Objects, both through the store's ``compose``
(S3 UploadPartCopy, local copy_file_range). Every level describes its work in
the plan model (``plan``: pure, no pyspark), so each commit relies on the same
``coverage.check_coverage``; SSO compaction's plan is made by ``planner``, and walctl.spark only
carries it out.
"""
