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

# A writer's blocks in flight at once (append's --iodepth). 6, not fio's customary 4: the AIO
# reaper that frees a slot shares 2 cores with the producer (`cat`) and the loop device's
# workers, and the loop device completes writes in batches, so at 4 the device sat idle between a
# batch's completion and the next submits. bench/append_bench.py, 64 KiB piped, depth 4 against
# 6 in alternating runs (2026-11-29): 609-675 against 803-847 MiB/s, p99 first record to durable
# 3.3-4.2 against 3.6-3.6 ms; 4 KiB 646-750 against 845-941 MiB/s, p99 4.4-5.6 against 4.0-4.9;
# 8 raised the 64 KiB p99 to 4.9-9.2 ms. (fio itself at 192 KiB: 1,484-1,661 MiB/s at depth 4,
# 1,562-1,874 at 6.)
DEFAULT_IODEPTH = 6
# ... and for a regular file's input (`append --input FILE`, or stdin redirected from one): the whole
# input is there, so the producer never waits and per-block latency is a bulk load's, not a live
# producer's. The disk wants bytes in flight: 64 KiB records make 192 KiB blocks (1.1 MiB at six),
# 4 KiB records 252 KiB ones. bench/append_bench.py's loop device, 1 GiB of 64 KiB records, io_uring,
# six alternating rounds (2026-11-29, notes s11/var.py): depth 6 918-1,078 MiB/s (median 981, p99
# 2.7-5.2 ms), 8 1,058-1,218 (1,111; 3.0-3.7), 10 1,099-1,263 (1,239; 3.4-4.2), fio at depth 4
# 1,311-1,510; CPU per GiB falls with depth (fewer waits for a slot). 4 KiB records: 6, 8 and 10
# the same (1,151-1,279). Piped 64 KiB at 8 or 10 raised p99 to 3.6-6.1 ms: streams keep six.
FILE_IODEPTH = 10

# The I/O engines a writer's block writes can go through (walctl.device.writequeue), and the
# variable that picks one for every command (checked when a command starts, walctl.cli.boundary).
# auto: io_uring where the kernel sets a ring up, else native AIO, else threads.
IO_ENGINES = ("auto", "io_uring", "aio", "threads")
IO_ENGINE_ENV = "WALCTL_IO_ENGINE"

# S3 under an outage or a silent endpoint (the CLI's --retry-for, --s3-connect-timeout,
# --s3-read-timeout; docs/CLI.md "S3 timeouts and retries"). A failing request is retried
# with backoff until DEFAULT_S3_RETRY_FOR_S has passed since its first attempt, and no attempt
# starts after that: a call fails at the latest retry-for + one attempt (connect + read
# timeout) + one backoff (2 s) = 30 + 10 + 15 + 2 = 57 s, within the minute an operator or a
# cron job should wait for exit 6. An endpoint that accepts and never answers fails in about
# 30 s (two 15 s read timeouts); a restart, failover or proxy blip of a few seconds is ridden out.
DEFAULT_S3_RETRY_FOR_S = 30.0
# Connecting takes milliseconds when the endpoint is up; 10 s rides out a lost SYN or two. urllib3
# also applies it to each send of a request body, so it is not lower.
DEFAULT_S3_CONNECT_TIMEOUT_S = 10.0
# Seconds of silence on a socket before an attempt fails (between bytes, not for a whole answer):
# S3 answers a request within a second or two once it has the body, and keeps long ones
# (CompleteMultipartUpload, UploadPartCopy) alive with whitespace.
DEFAULT_S3_READ_TIMEOUT_S = 15.0
