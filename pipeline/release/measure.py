"""Drawing the noisy measurements: the only step that spends privacy budget.

For one level and one query with allocation (rho_q, sigma²_q), every node's marginal gets independent exact
discrete Gaussian noise N_Z(0, sigma²_q) on every cell: rho_q-zCDP for the level under the configured
neighbouring relation (Thm 19.37(iii) with CKS20 Thm 4).  A Laplace query gets exact discrete Laplace noise
of its scale b: (Δ₁/b)-DP, i.e. (Δ₁/b)²/2-zCDP.  Nodes are disjoint, so Prop. 19.30 applies across them.
Noise is drawn once per charge and never retried or cached.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.budget.allocation import QueryAllocation
from pipeline.config.schema import Schema
from pipeline.dp.noise import sample_discrete_gaussian, sample_discrete_laplace
from pipeline.dp.random_source import RandomSource
from postprocess import QueryInvariant, QueryMeasurement


def measure_level(schema: Schema, histograms: np.ndarray, allocations: Sequence[QueryAllocation],
                  rng: RandomSource) -> list[QueryMeasurement]:
    """Noisy answers of every allocated query for every node of one level."""
    out = []
    for allocation in allocations:
        query = schema.parse_query(allocation.query)
        answers = schema.marginal(query, histograms)
        if allocation.scale is not None:
            noise = sample_discrete_laplace(allocation.scale, answers.size, rng=rng).reshape(answers.shape)
        else:
            noise = sample_discrete_gaussian(allocation.sigma2, answers.size, rng=rng).reshape(answers.shape)
        out.append(QueryMeasurement(name=query.name, matrix=schema.query_matrix(query),
                                    noisy=answers + noise, sigma2=allocation.sigma2))
        del answers  # true answers leave memory as soon as they are protected
    return out


def level_invariants(schema: Schema, histograms: np.ndarray, query_names: Sequence[str]) -> list[QueryInvariant]:
    """Exact values of the invariant queries at one level: published as they are, NOT protected."""
    out = []
    for name in query_names:
        query = schema.parse_query(name)
        out.append(QueryInvariant(name=query.name, matrix=schema.query_matrix(query),
                                  values=schema.marginal(query, histograms).astype(np.int64)))
    return out
