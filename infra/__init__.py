"""The dtrun Pulumi program: an Azure InfiniBand cluster as components."""
