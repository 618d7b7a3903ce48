"""lambo_recall: what the memory holds that answers a question (spec: lambo_recall).

The steps, one module each: ``request`` (arguments and defaults), ``dependency``
(questions answered by graph traversal), ``legs`` (keyword, vector, recent),
``names`` (exact names in a question), ``fusion`` (candidates and their scores),
``lines`` (warnings, and hits kept for them) and ``pipeline`` (one call, in order).
"""

from .fusion import Ranking
from .pipeline import recall
from .request import RecallDefaults, RecallResult

__all__ = ["Ranking", "RecallDefaults", "RecallResult", "recall"]
