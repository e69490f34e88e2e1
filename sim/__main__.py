"""``python -m sim`` runs the command-line interface."""

from sim.cli import main

main()
