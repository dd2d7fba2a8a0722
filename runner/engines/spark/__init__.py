"""Spark: a Spark master's executors are the nodes, one application per sweep and one barrier
job per launch (docs/spark.md).

Kept free of imports: the Spark driver runs ``python -m`` on a module of this package."""
