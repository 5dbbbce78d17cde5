"""Failures on executors as walctl's errors with the hints a cluster operator needs (never a raw traceback)."""

from __future__ import annotations

import re

from walctl.errors import IOFailure, NotFoundError, WalctlError

PYTHON_HINT = ("install walctl's dependencies (crc32c, boto3) on every executor and point Spark at that "
               "interpreter: export PYSPARK_PYTHON=/path/to/python before starting the driver "
               "(spark.executorEnv.PYSPARK_PYTHON on YARN or Kubernetes)")
CREDENTIALS_HINT = ("executors take S3 credentials from their own environment: an instance role, or "
                    "--conf spark.executorEnv.AWS_ACCESS_KEY_ID=... and spark.executorEnv.AWS_SECRET_ACCESS_KEY=...")
SHARED_PATH_HINT = ("executors open the store themselves: give an absolute path on storage every executor "
                    "mounts at the same place, or an s3:// store")



_ERROR_CLASSES = {2: "UsageError", 3: "CorruptionError", 4: "NotFoundError", 5: "RefusedError", 6: "IOFailure",
                  7: "FullError"}


def task_error(info: dict) -> WalctlError:
    """The walctl error a task reported, with the hint a cluster operator needs."""
    from walctl import errors

    if info["type"] == "ModuleNotFoundError":
        module = info.get("module") or info["what"]
        return NotFoundError(f"executors cannot import {module!r}", where="Spark executor", hint=PYTHON_HINT)
    cls = getattr(errors, info["type"], None)
    if not (isinstance(cls, type) and issubclass(cls, WalctlError)):
        cls = getattr(errors, _ERROR_CLASSES.get(info["exit_code"], "IOFailure"))
    hint = info.get("hint")
    if info["what"] == "no such store directory":
        hint = SHARED_PATH_HINT
    elif "credentials" in info["what"]:
        hint = CREDENTIALS_HINT
    return cls(f"on a Spark executor: {info['what']}", where=info.get("where"), hint=hint)


_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")


def classify(exc: BaseException) -> WalctlError:
    """A failed Spark job as one walctl error: no raw traceback, never 'a bug'."""
    if isinstance(exc, WalctlError):
        return exc
    text = str(exc)
    found = _MODULE.search(text)
    if found:
        return NotFoundError(f"executors cannot import {found.group(1)!r}", where="Spark executor",
                             hint=PYTHON_HINT)
    if "NoCredentialsError" in text or "Unable to locate credentials" in text:
        return IOFailure("executors found no S3 credentials", where="Spark executor", hint=CREDENTIALS_HINT)
    # The last line of the worker's traceback, or of the JVM's message, says the most.
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("at ", "File "))]
    errorline = next((ln for ln in reversed(lines) if re.match(r"^[A-Za-z_.]+(Error|Exception):", ln)),
                     lines[0] if lines else type(exc).__name__)
    return IOFailure(f"the Spark job failed: {errorline[:300]}", where="Spark",
                     hint="rerun with --debug for Spark's log; on a cluster check the executors' logs")
