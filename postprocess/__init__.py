"""Post-processing: noisy measurements and public constraints in, non-negative consistent integer tables out.

It never reads files, never touches microdata and never imports the orchestrator; everything it computes
is post-processing of differentially private measurements and costs no privacy (Thm 19.25 of the seed).
"""

from censusdp.postprocess.problem import (
    UNBOUNDED,
    LevelResult,
    QueryBound,
    QueryInvariant,
    QueryMeasurement,
    ReconciliationError,
)
from censusdp.postprocess.reconcile import reconcile_level
from censusdp.postprocess.ties import TieSource

__all__ = ["UNBOUNDED", "LevelResult", "QueryBound", "QueryInvariant", "QueryMeasurement", "ReconciliationError",
           "reconcile_level", "TieSource"]
