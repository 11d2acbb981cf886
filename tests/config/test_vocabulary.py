"""Closed vocabularies and shared defaults have one definition each, and every user of them uses it.

Before a reorganisation the format list, the default delta and the chunk size were each written
three times, the relation and mechanism were bare strings, and the Renyi row of ``censusdp budget`` recomputed
Bun-Steinke in floats without the accountant's round-up: each test here fails on one of those drifts.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
from fractions import Fraction
from pathlib import Path

import mpmath as mp
import pytest

from censusdp.pipeline.budget.accountants import comparison_rows
from censusdp.pipeline.budget.allocation import allocate
from censusdp.pipeline.budget.summary import budget_command
from censusdp.pipeline.cli.main import build_parser
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.config.model import DEFAULT_CHUNK_CELLS, Format, Mechanism, Neighbouring, ReleaseConfig
from censusdp.pipeline.dp.accounting import epsilon_bun_steinke
from censusdp.pipeline.errors import ConfigError
from censusdp.pipeline.exact import DEFAULT_DELTA
from censusdp.pipeline.release.chunks import level_chunks
from censusdp.postprocess.least_squares import SolverPath, check_solver


def subcommand(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices[name]


def option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action:
    (action,) = [a for a in parser._actions if flag in a.option_strings]
    return action


def test_a_loaded_configuration_holds_the_enums(tiny_release: Path) -> None:
    config = load_config(tiny_release)
    assert type(config.input.format) is Format and type(config.budget.neighbouring) is Neighbouring
    queries = [q for level in config.strategy.values() for q in level]
    assert queries and all(type(q.mechanism) is Mechanism for q in queries)
    # values as written, so manifests, digests and the ledger see the same text as before
    assert json.dumps([config.input.format, config.budget.neighbouring]) == json.dumps(["parquet", "replace-one"])


def test_sensitivities_come_from_the_relation() -> None:
    assert (Neighbouring.ADD_REMOVE.sensitivity2_squared, Neighbouring.ADD_REMOVE.sensitivity1) == (1, 1)
    assert (Neighbouring.REPLACE_ONE.sensitivity2_squared, Neighbouring.REPLACE_ONE.sensitivity1) == (2, 2)


@pytest.mark.parametrize(("field", "text", "problem"), [
    ("format = \"parquet\"", "format = \"xlsx\"", "unknown format 'xlsx' (one of: parquet, csv, mdf-pl94)"),
    ("neighbouring = \"replace-one\"", "neighbouring = \"swap\"", "one of: add-remove, replace-one"),
])
def test_an_unknown_word_lists_the_vocabulary(tiny_release: Path, field: str, text: str, problem: str) -> None:
    source = tiny_release.read_text()
    if field not in source:
        pytest.fail(f"the fixture no longer writes {field!r}")
    tiny_release.write_text(source.replace(field, text))
    with pytest.raises(Exception, match=problem.replace("(", r"\(").replace(")", r"\)")):
        load_config(tiny_release)


def test_every_format_option_offers_the_format_enum() -> None:
    for command in ("release", "check", "evaluate"):
        assert option(subcommand(command), "--format").choices == list(Format), command


def test_one_default_delta(tiny_release: Path) -> None:
    source = tiny_release.read_text()
    assert 'delta = "1e-10"\n' in source
    tiny_release.write_text(source.replace('delta = "1e-10"\n', ""))  # the configuration's default
    assert load_config(tiny_release).budget.delta_text == DEFAULT_DELTA
    report = json.loads(budget_command(None, "1/2", None, None, as_json=True))
    assert report["delta"] == float(DEFAULT_DELTA)
    ledger_help = option(subcommand("ledger"), "--delta").help
    assert ledger_help is not None and f"else {DEFAULT_DELTA})" in ledger_help


def test_one_default_chunk_size(tiny_release: Path) -> None:
    assert load_config(tiny_release).chunk_cells == DEFAULT_CHUNK_CELLS
    assert inspect.signature(level_chunks).parameters["max_cells"].default == DEFAULT_CHUNK_CELLS
    defaults = {f.name: f.default for f in ReleaseConfig.__dataclass_fields__.values()}
    assert defaults["chunk_cells"] == DEFAULT_CHUNK_CELLS


def test_the_renyi_row_is_the_accountants_bound_rounded_up(tiny_release: Path) -> None:
    config = load_config(tiny_release)
    allocations = allocate(config)
    delta = 1e-10
    row = comparison_rows(allocations, delta)[1]
    assert row["method"].startswith("Renyi DP")
    rho = sum((a.rho for a in allocations), Fraction(0))
    assert row["epsilon"] == epsilon_bun_steinke(rho, delta)
    with mp.workdps(60):
        exact = mp.mpf(rho.numerator) / rho.denominator
        exact = exact + 2 * mp.sqrt(exact * mp.log(1 / mp.mpf(delta)))
        assert mp.mpf(row["epsilon"]) >= exact


def with_solver(config: Path, solver: str, *, detailed_only: bool = False) -> Path:
    text = config.read_text()
    if detailed_only:  # every level measures the detailed query only, and no invariant
        text = text[: text.index("[[invariants]]")] + text[text.index("[[structural_zeros]]"):]
        head, _, rest = text.partition("[strategy.")
        text = head + "".join(f'[strategy.{level}]\ndetailed = "1"\n\n'
                              for level in ("root", "region", "district", "unit")) + "[[" + rest.split("[[", 1)[1]
    config.write_text(text + f'\n[postprocess]\nsolver = "{solver}"\n')
    return config


@pytest.mark.parametrize(("solver", "problem"), [
    ("first_order", "first_order needs a parent level"),
    ("fast", "fast needs only the detailed query and no invariant at every level (root has others)"),
    ("NO_SUCH_SOLVER", "solver(s) not installed: NO_SUCH_SOLVER (use auto, cvxpy, fast, first_order or installed"),
])
def test_a_solver_that_cannot_run_is_refused_by_the_configuration(tiny_release: Path, solver: str,
                                                                  problem: str) -> None:
    """Before any charge: the loader and ``reconcile_level`` share one vocabulary (``check_solver``), and a
    forced path that would not apply at some level is refused now, not after the noise is drawn."""
    with pytest.raises(ConfigError, match=re.escape(problem)):
        load_config(with_solver(tiny_release, solver))


@pytest.mark.parametrize("solver", ["auto", "cvxpy", "CLARABEL", "OSQP,SCS"])
def test_the_solvers_reconcile_level_runs_are_accepted(tiny_release: Path, solver: str) -> None:
    assert load_config(with_solver(tiny_release, solver)).solver == solver
    assert check_solver(solver) == solver


def test_fast_is_accepted_where_it_applies_everywhere(tiny_release: Path) -> None:
    config = with_solver(tiny_release, "fast", detailed_only=True)
    with pytest.raises(ConfigError, match="fast needs reconciliation = \"level_by_level\""):
        load_config(config)  # the default fits the GLS estimates of several queries: not the closed forms' problem
    config.write_text(config.read_text() + 'reconciliation = "level_by_level"\n')
    with pytest.raises(ConfigError, match=re.escape("rounding = []")):
        load_config(config)  # rounding the total first is not cell by cell
    config.write_text(config.read_text() + 'rounding = []\n')
    assert load_config(config).solver == "fast"
    assert {p.value for p in SolverPath} == {"auto", "cvxpy", "fast", "first_order"}
    with pytest.raises(ValueError, match="not installed"):
        check_solver("NO_SUCH_SOLVER")
