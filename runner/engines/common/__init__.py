"""What the engines share and no one engine owns: the executors' scripts and log pumps
(scripts.py), Ctrl-C held back (signals.py), dtrun's code as shipped to nodes and this machine's
Python (code.py), and the options of a Pulumi stack's cluster (stack.py). Every engine may import
it; it imports no engine (pyproject.toml, [tool.importlinter])."""
