"""`python -m services.kvxfer [flags]`: the same as `distserve kvxfer [flags]`."""

from services.kvxfer.cli import main

main()
