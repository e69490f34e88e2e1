"""``python -m sim`` runs the command-line interface."""

from sim.cli.app import main

main()
