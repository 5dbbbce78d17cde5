"""Local masters' Python workers import the installed, compiled pyspark rather than Spark's
pyspark.zip, py4j zip and spark-core jar (walctl.spark.worker / walctl.spark.daemon), and keep
those archives when no pyspark is installed beside the interpreter."""

from __future__ import annotations

import sys

from walctl.spark import worker


def test_spark_archives_are_told_from_other_path_entries():
    assert worker.spark_zip("/opt/spark/python/lib/pyspark.zip")
    assert worker.spark_zip("/opt/spark/python/lib/py4j-0.10.9.9-src.zip")
    assert worker.spark_zip("/venv/site-packages/pyspark/jars/spark-core_2.13-4.3.0.jar")
    assert not worker.spark_zip("/usr/lib/python311.zip")
    assert not worker.spark_zip("/work/userFiles-1/deps.zip")
    assert not worker.spark_zip("/work/lib/other.jar")
    assert not worker.spark_zip("/venv/site-packages")


def test_archives_go_only_when_pyspark_is_importable_without_them(monkeypatch, tmp_path):
    archives = [str(tmp_path / "lib" / "pyspark.zip"), str(tmp_path / "lib" / "py4j-0.10.9.9-src.zip")]
    monkeypatch.setattr(sys, "path", [*archives, *sys.path])
    worker.without_spark_zips()
    assert not any(p in sys.path for p in archives)  # the installed pyspark and py4j are found
    monkeypatch.setattr(sys, "path", [*archives, str(tmp_path)])  # nothing else holds pyspark
    saved = list(sys.path)
    worker.without_spark_zips()
    assert sys.path == saved


def test_a_local_jobs_worker_runs_the_installed_pyspark(spark):
    from walctl.spark.job import ship_walctl

    sc = spark.sparkContext
    ship_walctl(sc)

    def where(_):
        import sys as worker_sys

        import pyspark

        return pyspark.__file__, [p for p in worker_sys.path if p.endswith((".zip", ".jar")) and "pyspark" in p]

    ((module, archives),) = sc.parallelize([0], 1).map(where).collect()
    assert ".zip" not in module and archives == []
