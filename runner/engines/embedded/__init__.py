"""The embedded cluster: nodes on 127.0.0.x, process groups on this machine (docs/clusters.md)."""
