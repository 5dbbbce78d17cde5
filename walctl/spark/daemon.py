"""A local master's Python worker daemon (``spark.python.daemon.module``): pyspark.daemon
from the installed pyspark, its forked workers too (see walctl.spark.worker)."""

from walctl.spark.worker import main

if __name__ == "__main__":
    main("pyspark.daemon")
