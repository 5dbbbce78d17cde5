"""One local[2] SparkSession for the whole test session (starting Spark costs ~10 s)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark(s3_server):
    # Executors take S3 credentials from the environment they start with (as on a cluster,
    # where an instance role or spark.executorEnv.* provides them): so the moto server's
    # fake credentials must be in os.environ before Spark starts.
    from walctl.spark.session import spark_session

    session = spark_session("local[2]", worker_daemon=True)  # many jobs on one session: forked workers
    yield session
    session.stop()
