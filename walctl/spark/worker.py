"""A local master's Python worker: Spark's own (pyspark.worker) from the installed pyspark.

Spark starts its workers with its pyspark.zip, py4j zip and spark-core jar first on
PYTHONPATH. Python compiles a zip's modules from source at every start (zipimport caches no
bytecode), and the worker re-reads the archives' directories (the jar's ~6000 entries) when
it sets up the task's files (importlib.invalidate_caches): ~0.7 s of each worker's start and
~13 MiB of its memory. The same modules installed beside this interpreter are compiled
once, and the jar holds no Python. Used
(``spark.python.worker.module``) only where the workers run the driver's interpreter, whose
pyspark is an installed one (the one talking to the JVM); when the worker finds no pyspark
outside the zips it keeps them.
"""

import runpy
import sys
from importlib.machinery import PathFinder


def spark_zip(entry: str) -> bool:
    """A path entry that is one of Spark's archives: pyspark.zip, py4j-*-src.zip, a jar of its
    jars/ directory."""
    folder, _, name = entry.replace("\\", "/").rpartition("/")
    return ((name.endswith(".zip") and name.startswith(("pyspark", "py4j")))
            or (name.endswith(".jar") and folder.rpartition("/")[2] == "jars"))


def without_spark_zips() -> None:
    """Drop Spark's archives from the import path (and their importers) when pyspark and py4j
    are importable without them; else leave the path as it is."""
    zips = [p for p in sys.path if spark_zip(p)]
    if not zips:
        return
    kept = [p for p in sys.path if not spark_zip(p)]
    if any(PathFinder.find_spec(name, kept) is None for name in ("pyspark", "py4j")):  # the path alone
        return
    sys.path[:] = kept
    for path in zips:
        sys.path_importer_cache.pop(path, None)


def main(module: str) -> None:
    without_spark_zips()
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main("pyspark.worker")
