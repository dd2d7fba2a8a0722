"""`python -m dtrun.cli`: the dtrun command line."""

from dtrun.cli.app import main

main()
