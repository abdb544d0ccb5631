"""The index build on Spark: :func:`sketch.spark.job.build_dataset_spark` and ``append_dataset_spark``.

=================  ==========================================================================
module             holds
=================  ==========================================================================
``job``            the entry points: read, order, write parts and leaves in executors, merge on the driver
``session``        the SparkSession (local mode or ``SPARK_MASTER``) and Spark's errors as ours
``read``           input files read by many tasks, ordered and numbered
``frames``         the per-task stages over Arrow batches (parts, seek files, leaf bits)
``windows``        count-based windows cut across tasks
``leaves``         leaf runs merged bottom-up into the tree (Baltus Alg. 1–2)
=================  ==========================================================================

Nothing here is imported with the package, so that importing a submodule does not start PySpark.
"""
