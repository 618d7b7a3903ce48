"""The `lambo` command line: click commands only. Parse, call the library, print.

``cli`` is the root click group, ``main`` the console script's entry point.
"""

from .main import cli, main

__all__ = ["cli", "main"]
