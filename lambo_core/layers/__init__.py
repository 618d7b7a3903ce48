"""Layered sessions: a session that also reads and writes shared layers such as general.

``handle`` attaches one layer (held here or forwarded to its holder), ``internal`` is what a
hub answers a layered session beyond the public tools, ``service`` routes each call by
scope and merges recall. Spec: lambo_recall, "Layered sessions"; lambo_derive, "Writing to
a layer".
"""
