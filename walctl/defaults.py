"""One home for walctl's alignment unit and its default sizes.

At the bottom of the layers (it imports nothing), so format/, device/, store/ and
the pipelines all take the same value from here instead of repeating it. Modules
keep their own names for these values (re-bound from here) so callers do not move.
"""

# The unit of every device offset, length and buffer address: the page size and the
# largest logical block size walctl accepts (O_DIRECT on 4Kn and 512e disks).
ALIGN = 4096

# FORMATS.md 3: a DataBlock closes once its payload reaches 1 MiB.
DEFAULT_BLOCK_SIZE = 1 << 20
# FORMATS.md 3: a stream this large gets its own Stream Object.
DEFAULT_SPLIT_SIZE = 16 << 20
# AutoMQ's default compaction cache (s3.stream.set.object.compaction.cache.size).
DEFAULT_MEMORY_LIMIT = 200 << 20

# S3 refuses multipart parts below 5 MiB (except the last one).
MIN_PART_BYTES = 5 << 20
# FORMATS.md 4: at or below this size an object is one PUT: a part round trip costs
# more than it saves, and one PUT is atomic on every S3-compatible store.
MULTIPART_THRESHOLD_BYTES = 32 << 20
# >= MIN_PART_BYTES; only the last part may be smaller.
DEFAULT_PART_BYTES = 8 << 20
# S3's hard limit on the number of parts of one multipart upload.
MAX_PARTS = 10_000
# S3's largest part, for UploadPartCopy as for UploadPart.
MAX_PART_BYTES = 5 << 30

# The I/O engines a writer's block writes can go through (walctl.device.writequeue), and the
# variable that picks one for every command (checked when a command starts, walctl.cli.boundary).
IO_ENGINES = ("auto", "aio", "threads")
IO_ENGINE_ENV = "WALCTL_IO_ENGINE"
