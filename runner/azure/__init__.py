"""What Azure offers and how a stack is described and driven: the InfiniBand size catalog,
the stack configuration (Pulumi.yaml's schema -> ClusterSpec) and the Automation API (stack.py,
the only importer of pulumi.automation). May import dtrun.spec, errors, render.
"""
