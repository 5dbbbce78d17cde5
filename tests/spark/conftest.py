"""One local[2] SparkSession (starting Spark costs ~10 s) and one standalone master for the whole test session
(the driver JVMs share a class-data archive: tests/conftest.py's spark_class_archive)."""

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


@pytest.fixture(scope="session")
def spark_master(tmp_path_factory, s3_server):
    """A standalone master (clusterhelpers.Standalone) for the session, with no worker of its own:
    a test starts its workers (``start_worker``) through ``standalone_cluster``, which stops them.
    s3_server: its fake credentials are in os.environ before the master (and its workers'
    environment) is set up."""
    from clusterhelpers import Standalone

    cluster = Standalone(tmp_path_factory.mktemp("standalone"))
    try:
        cluster.start_master()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def standalone_cluster(spark_master):
    """The session's master with no alive worker at the start of the test (one another test stopped
    may take a moment to be dropped); every worker the test starts is stopped at its end."""
    spark_master.wait_no_worker()
    try:
        yield spark_master
    finally:
        spark_master.stop_workers()
