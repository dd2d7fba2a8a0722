"""The Ray engine: --ray ADDRESS, a Ray cluster's nodes (docs/ray.md)."""
