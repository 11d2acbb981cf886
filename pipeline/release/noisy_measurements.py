"""Drawing the noisy measurements: the only step that spends privacy budget (the guarantee: ``noisy_answers``).

Nodes are disjoint, so Prop. 19.30 applies across them.  Noise is drawn once per charge and never retried or cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from censusdp.pipeline.budget.allocation import QueryAllocation
from censusdp.pipeline.config.model import Mechanism
from censusdp.pipeline.config.schema import Schema
from censusdp.pipeline.dp.noise import sample_discrete_gaussian, sample_discrete_laplace
from censusdp.pipeline.dp.random_source import RandomSource
from censusdp.postprocess import QueryInvariant, QueryMeasurement


def measure_level(schema: Schema, histograms: np.ndarray, allocations: Sequence[QueryAllocation],
                  rng: RandomSource) -> list[QueryMeasurement]:
    """Noisy answers of every allocated query for every node of one level."""
    out = []
    for allocation in allocations:
        query = schema.parse_query(allocation.query)
        answers = schema.marginal(query, histograms)
        noisy = noisy_answers(answers, allocation.mechanism, allocation.sigma2, allocation.scale, rng)
        out.append(QueryMeasurement(name=query.name, matrix=schema.query_matrix(query), noisy=noisy,
                                    sigma2=allocation.sigma2))
        del answers  # true answers leave memory as soon as they are protected
    return out


def noisy_answers(answers: np.ndarray, mechanism: Mechanism, sigma2: Fraction, scale: Fraction | None,
                  rng: RandomSource) -> np.ndarray:
    """``answers`` with independent noise of ``mechanism`` on every cell: the one place noise meets answers.

    The release draws its measurements here and the bootstrap its replicates (with the release's recorded
    mechanism and public parameters), so the two cannot drift apart.  Under the configured neighbouring relation,
    Gaussian: N_Z(0, sigma2), rho-zCDP for rho = Δ₂²/(2 sigma2) (CKS20 Thm 4; Thm 19.37(iii)); Laplace: scale b,
    (Δ₁/b)-DP (Thm 19.14, on Z), i.e. (Δ₁/b)²/2-zCDP.
    """
    if mechanism == Mechanism.LAPLACE:
        if scale is None:
            raise ValueError("a Laplace measurement needs its scale")
        noise = sample_discrete_laplace(scale, answers.size, rng=rng)
    else:
        noise = sample_discrete_gaussian(sigma2, answers.size, rng=rng)
    return answers + noise.reshape(answers.shape)


def level_invariants(schema: Schema, histograms: np.ndarray, query_names: Sequence[str]) -> list[QueryInvariant]:
    """Exact values of the invariant queries at one level: published as they are, NOT protected."""
    out = []
    for name in query_names:
        query = schema.parse_query(name)
        out.append(QueryInvariant(name=query.name, matrix=schema.query_matrix(query),
                                  values=schema.marginal(query, histograms).astype(np.int64)))
    return out
