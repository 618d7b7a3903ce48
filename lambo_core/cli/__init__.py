"""The `lambo` command line: click commands only. Parse, call the library, print.

``cli`` is the root click group, ``main`` the console script's entry point.
"""

from .common import reports_errors  # until canon_commands moves into this package
from .main import cli, main

__all__ = ["cli", "main", "reports_errors"]
