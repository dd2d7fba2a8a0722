"""dtrun: measure whether distributed training really scales, from cluster-as-code to report."""

__version__ = "0.1.0"
