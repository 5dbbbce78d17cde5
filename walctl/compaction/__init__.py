"""Compaction without Spark: Stream Object compaction and Force Split by server-side copy.

SSO compaction (level 1, ``walctl.spark``) reads blocks and re-uploads them. The levels here
never hold object data: ``so`` merges consecutive Stream Objects of a stream, ``split``
splits Stream Set Objects into Stream Objects, both through the store's ``compose``
(S3 UploadPartCopy, local copy_file_range). Both plan with walctl.spark.plan's dataclasses
(pure, no pyspark) so the commit relies on the same ``check_coverage`` as SSO compaction.
"""
