"""censusdp budget optimize: shares ∝ √weight, exact rounding, a configuration that loads, clear errors."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from censusdp.pipeline.budget.optimize import optimal_shares, optimize_budget, round_shares
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.errors import CensusDPError


def objective(weights: dict, shares: dict) -> float:
    return sum(w / shares[k] for k, w in weights.items())


def test_square_root_rule_is_optimal() -> None:
    rng = np.random.default_rng(0)  # test-only
    weights = {(f"l{i}", "q"): float(w) for i, w in enumerate(rng.uniform(0.1, 10, 6))}
    best = optimal_shares(weights)
    roots = np.sqrt(list(weights.values()))
    np.testing.assert_allclose(list(best.values()), roots / roots.sum())
    for _ in range(200):  # any other split of the same budget is worse
        other = rng.dirichlet(np.ones(6))
        assert objective(weights, best) <= objective(weights, dict(zip(weights, other, strict=True))) + 1e-12


def test_zero_weights_get_the_documented_floor() -> None:
    shares = optimal_shares({("a", "x"): 4.0, ("a", "y"): 1.0, ("b", "z"): 0.0})
    assert shares[("b", "z")] == pytest.approx(0.01 * shares[("a", "y")])


def test_rounding_is_exact_and_positive() -> None:
    rounded = round_shares({"a": 0.9995, "b": 0.0001, "c": 0.0004}, 1000)
    assert sum(rounded.values()) == 1 and all(v > 0 for v in rounded.values())
    assert all(v.denominator <= 1000 for v in rounded.values())
    assert round_shares({"a": 1.0, "b": 2.0}, 3) == {"a": Fraction(1, 3), "b": Fraction(2, 3)}


def test_optimize_writes_a_configuration_that_loads(tiny_release: Path) -> None:
    out = tiny_release.parent / "optimised.toml"
    result = optimize_budget(tiny_release, "root:total=10,unit:detailed=1,district:adult*colour=2", out)
    assert result["after"] < result["before"]
    config = load_config(out)
    assert sum(config.budget.level_shares.values()) == 1
    for level in config.levels:
        assert sum(e.share for e in config.strategy[level.name]) == 1
        assert all(e.share > 0 for e in config.strategy[level.name])
    assert config.budget.rho == load_config(tiny_release).budget.rho  # the guarantee does not change
    shares = {(lv, e.query.name): config.budget.level_shares[lv] * e.share
              for lv in config.strategy for e in config.strategy[lv]}
    assert shares[("root", "total")] > shares[("unit", "detailed")]
    assert float(shares[("root", "total")] / shares[("unit", "detailed")]) == pytest.approx(10**0.5, rel=0.02)


def test_equal_weights_reach_the_bound(tiny_release: Path) -> None:
    result = optimize_budget(tiny_release, "*:*=1", None)
    assert result["after"] == pytest.approx(result["optimum"], rel=1e-9)  # 8 queries: 1/8 each, exactly
    assert result["path"] is None


def test_weights_from_a_toml_file(tiny_release: Path) -> None:
    weights = tiny_release.parent / "weights.toml"
    weights.write_text('[weights.region]\ncolour = 3\n[weights.unit]\ndetailed = 1\n')
    result = optimize_budget(tiny_release, str(weights), None)
    assert result["weights"]["region:colour"] == 3 and result["weights"]["root:total"] == 0


@pytest.mark.parametrize("spec, message", [
    ("nowhere:total=1", "not a level x query"),
    ("unit:total=1", "not a level x query"),
    ("unit:detailed=-1", ">= 0"),
    ("unit:detailed=0", "at least one positive"),
    ("unit:detailed", "LEVEL:QUERY=WEIGHT"),
    ("unit:shape=1", "unknown attribute"),
])
def test_bad_weights_are_clear_errors(tiny_release: Path, spec: str, message: str) -> None:
    with pytest.raises(CensusDPError, match=message):
        optimize_budget(tiny_release, spec, None)

