"""`python -m benchbase` is the `benchbase` command."""

from benchbase.cli import main

main()
