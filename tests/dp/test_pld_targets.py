"""The PLD against Google's dp-accounting, on the pl94-2020 preset, and as the accountant
of budget.epsilon targets (pipeline/config/load.py)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

import censusdp.pipeline.config as config_package
from censusdp.pipeline.budget.accountants import epsilon_pld_of
from censusdp.pipeline.budget.allocation import allocate
from censusdp.pipeline.budget.summary import config_budget
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.config.model import Accountant
from censusdp.pipeline.dp.accounting import epsilon_cks20
from censusdp.pipeline.dp.pld import GaussianNoise, epsilon_pld
from censusdp.pipeline.errors import ConfigError
from tests.helpers.configs import edit_config
from tests.helpers.pld_reference import gaussian_epsilon
from tests.helpers.tiny import TINY_TOML

PRESET = Path(config_package.__file__).parent / "presets" / "pl94-2020.toml"


@pytest.mark.parametrize("sigmas", [[2.0], [3.0, 5.0], [1.5, 4.0, 10.0], [8.0] * 6])
@pytest.mark.parametrize("delta", [1e-5, 1e-10])
def test_against_dp_accounting(sigmas: list[float], delta: float) -> None:
    """Ours (certified, replace-one: two cells per query) lies above dp-accounting's optimistic estimate and within
    1% (+0.01) of its pessimistic one."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    def composed(pessimistic: bool) -> float:
        dists = [pld.from_discrete_gaussian_mechanism(s, sensitivity=1, pessimistic_estimate=pessimistic,
                                                      value_discretization_interval=1e-4) for s in sigmas * 2]
        total = dists[0]
        for d in dists[1:]:
            total = total.compose(d)
        return total.get_epsilon_for_delta(delta)

    ours = epsilon_pld([GaussianNoise(Fraction(s) ** 2) for s in sigmas], delta, cells=2)
    assert ours >= composed(False) - 1e-6
    assert ours <= composed(True) * 1.01 + 0.01


def test_pl94_2020_figure() -> None:
    """At rho = 293764/114921, delta = 1e-10, CKS20 gives 17.14, the continuous Gaussian 16.47; the
    certified discrete composition lies between (above the continuous value less 0.1%)."""
    config = load_config(PRESET)
    figure = epsilon_pld_of(allocate(config), 1e-10, sensitivity2_squared=config.budget.sensitivity2_squared,
                            sensitivity1=config.budget.sensitivity1)
    eps = figure.epsilon
    assert figure.note is None  # certified by the curve, not the fallback
    assert gaussian_epsilon(float(config.budget.rho), 1e-10) * 0.999 <= eps < 16.55
    assert eps < epsilon_cks20(config.budget.rho, 1e-10) - 0.5


def _write(tmp_path: Path, budget: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(TINY_TOML.format(rho="4").replace('rho = "4"', budget))
    return path


def test_pld_target_is_met_and_tight(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, 'epsilon = "3"'))  # the default accountant: pld
    budget = config.budget
    assert budget.accountant is Accountant.PLD and budget.target_epsilon == 3.0
    cells = budget.sensitivity2_squared
    assert epsilon_pld_of(allocate(config), budget.delta, sensitivity2_squared=cells,
                          sensitivity1=budget.sensitivity1).epsilon <= 3.0
    shares = [budget.level_shares[lv.name] * e.share for lv in config.levels for e in config.strategy[lv.name]]
    more = budget.rho * Fraction(1002, 1000)
    assert epsilon_pld([GaussianNoise(Fraction(cells) / (2 * more * s)) for s in shares], budget.delta,
                       cells=cells) > 3.0
    cks = load_config(_write(tmp_path, 'epsilon = "3"\naccountant = "cks20"')).budget
    assert cks.accountant is Accountant.CKS20 and epsilon_cks20(cks.rho, cks.delta) <= 3.0
    assert budget.rho > cks.rho * Fraction(103, 100)  # the PLD buys more rho for the same epsilon


def test_accountant_is_a_closed_vocabulary(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="budget.accountant"):
        load_config(_write(tmp_path, 'epsilon = "3"\naccountant = "renyi"'))
    assert load_config(_write(tmp_path, 'rho = "1"')).budget.accountant is None


def test_budget_report_shows_the_pld(tmp_path: Path) -> None:
    report = config_budget(str(_write(tmp_path, 'epsilon = "3"')), None)
    assert report["epsilon_pld"] <= 3.0 < report["epsilon_cks20"] and report["accountant"] == "pld"
    assert any(row["method"].endswith("(PLD)") for row in report["comparison"])


def test_a_target_no_curve_can_certify_is_refused_by_key_at_once(tmp_path: Path) -> None:
    """delta = 1e-30 is below what any curve at 2^-96 can hold: the search used to halve rho for ever; now the
    configuration is refused naming budget.delta, and the CKS20 accountant still serves it."""
    path = tmp_path / "config.toml"
    text = TINY_TOML.format(rho="4").replace('rho = "4"', 'epsilon = "5"').replace('delta = "1e-10"', 'delta = "1e-30"')
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.key == "budget.delta" and "cks20" in caught.value.problem
    assert load_config(edit_config(path, {"budget.accountant": "cks20"})).budget.rho > 0
