"""Post-processing: noisy measurements and public constraints in, non-negative consistent integer tables out.

It never reads files, never touches microdata and never imports the orchestrator; everything it computes
is post-processing of differentially private measurements and costs no privacy (Thm 19.25 of the seed).
"""

from postprocess.problem import LevelResult, QueryInvariant, QueryMeasurement, ReconciliationError
from postprocess.reconcile import reconcile_level

__all__ = ["LevelResult", "QueryInvariant", "QueryMeasurement", "ReconciliationError", "reconcile_level"]
