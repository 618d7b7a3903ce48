"""Garbage collection: sweeps that drop the concepts and weak edges memory no longer needs.

Spec: lambo_stats (``gc``), "Keeping a concept alive" under Contradiction warnings, and
"Saying an existing concept is wrong" (its garbage-collection exceptions). One module per
step: ``settings`` (the ``[gc]`` knobs and the rules' constants), ``plan`` (what one sweep
would do), ``sweep`` (running it on a session, survivors, stats) and ``report`` (what a
sweep says, and what a session keeps of it in RAM). Design notes: docs/design.md,
"Garbage collection".
"""
