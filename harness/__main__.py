"""`python -m harness` is the same as the `moecal` console script."""

from harness.cli.app import main

main()
