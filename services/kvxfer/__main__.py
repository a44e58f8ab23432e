"""`python -m services.kvxfer [flags]`: the same as `distserve kvxfer [flags]`."""

import sys

from services.cli import main

main(["kvxfer", *sys.argv[1:]])
