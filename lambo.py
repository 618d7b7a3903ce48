#!/usr/bin/env python3
"""Run the lambo CLI from a checkout (and, later, as the zipapp's entry point)."""

import sys

from lambo_core.cli import main

if __name__ == "__main__":
    sys.exit(main())
