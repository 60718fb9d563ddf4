"""`python -m fnserve` is the `fnserve` command."""

from fnserve.cli import main

main()
