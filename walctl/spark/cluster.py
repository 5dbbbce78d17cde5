"""Where SSO compaction's Spark tasks run, and whether they can reach the store from there."""

from __future__ import annotations

import os
import re

from walctl.errors import RefusedError

DEFAULT_MASTER = "local[*]"  # when neither --master nor spark-submit (or PYSPARK_SUBMIT_ARGS) names one
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def is_local_master(master: str) -> bool:
    """local, local[N], local[*], local[N,F]: executors are threads of this machine's JVM."""
    return master == "local" or master.startswith("local[")


def store_for_executors(store_url: str, master: str | None, *, shared_path: bool = False) -> str:
    """The store URL the executors get: S3 as given; a local directory made absolute, and only on a
    local master or with ``shared_path`` (the operator says every executor mounts it at that path).

    Raises:
        RefusedError: a local-directory store with a cluster master and no ``shared_path``.
    """
    match = _SCHEME.match(store_url)
    if match and match.group(1).lower() != "file":
        return store_url  # s3://: every executor reaches it by URL
    master = requested_master(master)
    if is_local_master(master):
        return store_url
    if not shared_path:
        raise RefusedError(f"the store is a local directory and the Spark master is {master}: its executors "
                           "run on other machines and would not find it", where=store_url,
                           hint="use an s3:// store, or mount the directory at the same path on every "
                                "executor and pass --shared-path")
    path = store_url[len("file://"):] if match else store_url
    return os.path.abspath(path)


def requested_master(master: str | None) -> str:
    """The master the job will run on, known before Spark starts: ``--master`` if given; else,
    under spark-submit (its JVM is already up, so joining it is cheap), its ``spark.master``;
    else a ``--master`` in PYSPARK_SUBMIT_ARGS; else DEFAULT_MASTER."""
    if master is not None:
        return master
    if os.environ.get("PYSPARK_GATEWAY_PORT"):  # launched by spark-submit
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()
        found = SparkConf().get("spark.master", None)
        if found:
            return found
    args = os.environ.get("PYSPARK_SUBMIT_ARGS", "").split()
    for i, arg in enumerate(args):
        if arg == "--master" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--master="):
            return arg.partition("=")[2]
    return DEFAULT_MASTER
