"""Canonization: Candidate -> Venerable -> Canonical under a promotion policy, and supersession.

Spec: lambo_inspect (the admission section), lambo_saints, lambo_stats (``promotion_policy``,
the canonization counters) and "Superseded concepts". One module per step: ``rules`` (the
``[canonization]`` settings), ``evidence`` (counted support, newer evidence), ``solo`` (Solo's
score bar), ``gates`` (one concept's next hop), ``admission`` (inspect's section), ``history``
(demotions and the superseded line) and ``cycle`` (what the daemon runs). Design notes:
docs/design.md, "Canonization".
"""
