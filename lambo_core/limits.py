"""Limits from the spec's "Limits" table that several layers share, as plain constants.

Nothing is imported here, so the CLI can build its help texts from these without
loading the library behind them.
"""

WAIT_MS_MAX = 34_000  # the longest wait_ms lambo_stats honours, in milliseconds
