"""One reconciliation level validated and split into parent blocks, as ``reconcile_level`` does before solving."""

from __future__ import annotations

from censusdp.postprocess.layout import Blocks, plan_blocks
from censusdp.postprocess.problem import Inputs, validate


def planned_level(measurements, invariants, n_cells: int, parent=None, parent_index=None,
                  zeros=None) -> tuple[Inputs, Blocks]:
    """The validated inputs of a level (``parent`` the parents' counts, or None at the root) and its blocks."""
    inputs = validate(measurements, invariants, n_cells=n_cells, parent_counts=parent, parent_index=parent_index,
                      structural_zeros=zeros)
    return inputs, plan_blocks(inputs)
