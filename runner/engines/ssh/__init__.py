"""SSH: the hosts of a hosts file, or a Pulumi stack's nodes registered on its shared storage,
reached with asyncssh (docs/clusters.md, docs/azure.md)."""
