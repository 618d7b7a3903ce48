"""`python -m lambo_core`: the `lambo` command."""

import sys

from lambo_core.cli import main

if __name__ == "__main__":
    sys.exit(main())
