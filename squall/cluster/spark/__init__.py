"""Squall on Spark: ``SparkCluster`` runs topologies as Spark barrier jobs (see
:mod:`squall.cluster.spark.cluster`). Needs ``pip install "squall[spark]"`` (pyspark 4.x)."""

try:
    import pyspark
except ImportError as e:
    raise ImportError('running topologies on Spark needs pyspark: pip install "squall[spark]"') from e

if int(pyspark.__version__.split(".")[0]) < 4:
    raise ImportError(f'Squall needs pyspark 4.x, found {pyspark.__version__}: pip install "squall[spark]"')

from squall.cluster.spark.cluster import SparkCluster, SparkSetupError  # noqa: E402 - after the check above
from squall.cluster.spark.java import JavaNotFoundError  # noqa: E402

__all__ = ["JavaNotFoundError", "SparkCluster", "SparkSetupError"]
