"""Error paths: inconsistent public constraints, malformed arguments, a broken table, and the boundaries
of the package (no orchestrator, no files, no microdata)."""

from __future__ import annotations

import ast
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import censusdp.postprocess.reconcile as reconcile
from censusdp.postprocess import QueryInvariant, QueryMeasurement, ReconciliationError, reconcile_level

N = 4
IDENTITY = sp.identity(N, format="csr")
ONES = sp.csr_matrix(np.ones((1, N)))
SECRETS = (7919, 104729, 1299709)  # distinctive values: none may appear in an error message


def detailed(noisy, sigma2=1):
    return QueryMeasurement("detailed", IDENTITY, np.asarray(noisy), Fraction(sigma2))


def assert_no_values(message: str) -> None:
    for value in SECRETS:
        assert str(value) not in message


def test_children_totals_not_adding_up_to_the_parent():
    parent = np.array([[SECRETS[0], SECRETS[1], 0, 5]])
    totals = np.array([[SECRETS[0]], [SECRETS[1] + 7]])  # sums to parent total + 2
    with pytest.raises(ReconciliationError, match="inconsistent with the parent table") as error:
        reconcile_level(
            [detailed(np.zeros((2, N), dtype=np.int64))],
            n_cells=N,
            parent_counts=parent,
            parent_index=np.array([0, 0]),
            invariants=[QueryInvariant("total", ONES, totals)],
        )
    assert_no_values(str(error.value))
    assert "1 of 1 parents" in str(error.value)


def test_inconsistent_invariants_at_the_root_are_infeasible():
    """Total says one thing, the two halves another: no table satisfies both; every solver must fail."""
    halves = sp.csr_matrix(np.array([[1, 1, 0, 0], [0, 0, 1, 1]], dtype=float))
    with pytest.raises(ReconciliationError, match="least squares failed") as error:
        reconcile_level(
            [detailed([[SECRETS[0], 1, 2, 3]])],
            n_cells=N,
            parent_counts=None,
            parent_index=None,
            invariants=[
                QueryInvariant("total", ONES, np.array([[SECRETS[2]]])),
                QueryInvariant("halves", halves, np.array([[SECRETS[0], SECRETS[1]]])),
            ],
            solver="CLARABEL,OSQP",
        )
    assert "CLARABEL=infeasible" in str(error.value)
    assert_no_values(str(error.value))


def test_negative_invariant():
    with pytest.raises(ReconciliationError, match="negative"):
        reconcile_level(
            [detailed([[1, 2, 3, 4]])],
            n_cells=N,
            parent_counts=None,
            parent_index=None,
            invariants=[QueryInvariant("total", ONES, np.array([[-SECRETS[0]]]))],
        )


def test_invariant_on_structural_zeros_only():
    last = sp.csr_matrix(np.array([[0, 0, 0, 1]], dtype=float))
    with pytest.raises(ReconciliationError, match="structural-zero") as error:
        reconcile_level(
            [detailed([[1, 2, 3, 4]])],
            n_cells=N,
            parent_counts=None,
            parent_index=None,
            invariants=[QueryInvariant("last", last, np.array([[SECRETS[0]]]))],
            structural_zeros=np.array([False, False, False, True]),
        )
    assert_no_values(str(error.value))


def test_parent_not_zero_on_structural_zeros():
    with pytest.raises(ReconciliationError, match="structural-zero"):
        reconcile_level(
            [detailed(np.zeros((2, N), dtype=np.int64))],
            n_cells=N,
            parent_counts=np.array([[1, 2, 3, SECRETS[0]]]),
            parent_index=np.array([0, 0]),
            structural_zeros=np.array([False, False, False, True]),
        )


def test_negative_parent():
    with pytest.raises(ReconciliationError, match="negative"):
        reconcile_level(
            [detailed(np.zeros((2, N), dtype=np.int64))],
            n_cells=N,
            parent_counts=np.array([[1, 2, 3, -1]]),
            parent_index=np.array([0, 0]),
        )


@pytest.mark.parametrize("path", ["cvxpy", "fast"])
def test_a_broken_table_is_never_returned(monkeypatch, path):
    """The final checks are real code, not ``assert``: a rounding bug makes the run fail."""
    if path == "cvxpy":
        monkeypatch.setattr(reconcile, "round_batch", lambda batch, x, *args, **kwargs: (
            np.ones(x.size, dtype=np.int64), "broken"))
    else:
        monkeypatch.setattr(reconcile.fast_path, "largest_remainder",
                            lambda x, p, rng: np.ones(x.shape, dtype=np.int64))
    with pytest.raises(ReconciliationError, match="do not sum to their parent"):
        reconcile_level(
            [detailed([[5, 1, 0, 2], [1, 1, 1, 1]])],
            n_cells=N,
            parent_counts=np.array([[6, 2, 1, 3]]),
            parent_index=np.array([0, 0]),
            **({"solver": "cvxpy"} if path == "cvxpy" else {}),
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_cells": 3}, "columns"),
        ({"parent_counts": np.zeros((1, N), dtype=np.int64)}, "both"),
        ({"parent_counts": np.zeros((1, N)), "parent_index": np.zeros(2, dtype=np.int64)}, "integer"),
        ({"parent_counts": np.zeros((1, N), dtype=np.int64), "parent_index": np.array([0, 1])}, "outside"),
        ({"structural_zeros": np.zeros(N, dtype=np.int64)}, "boolean"),
        ({"invariants": [QueryInvariant("total", ONES, np.array([[1.5], [2.0]]))]}, "integers"),
        ({"solver": "NOT_A_SOLVER"}, "not installed"),
    ],
)
def test_malformed_arguments(kwargs, match):
    arguments = {"n_cells": N, "parent_counts": None, "parent_index": None, **kwargs}
    with pytest.raises(ValueError, match=match):
        reconcile_level([detailed(np.zeros((2, N), dtype=np.int64))], **arguments)


def test_malformed_measurements():
    with pytest.raises(ValueError, match="0 or 1"):
        bad = QueryMeasurement("weighted", 2 * IDENTITY, np.zeros((1, N)), Fraction(1))
        reconcile_level([bad], n_cells=N, parent_counts=None, parent_index=None)
    with pytest.raises(ValueError, match="sigma2"):
        bad = QueryMeasurement("detailed", IDENTITY, np.zeros((1, N)), Fraction(0))
        reconcile_level([bad], n_cells=N, parent_counts=None, parent_index=None)
    with pytest.raises(ValueError, match="at least one"):
        reconcile_level([], n_cells=N, parent_counts=None, parent_index=None)


def test_postprocess_does_not_import_the_orchestrator_or_io():
    code = "import sys, postprocess; print(sorted({'prefect', 'polars', 'pyarrow'} & set(sys.modules)))"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_postprocess_never_opens_files_or_draws_random_numbers():
    forbidden_calls = {"open", "read_parquet", "read_csv", "scan_parquet", "load", "loadtxt"}
    package = Path(reconcile.__file__).parent  # the imported package's files, wherever installed
    for path in package.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", getattr(node.func, "id", ""))
                assert name not in forbidden_calls, f"{path.name} calls {name}"
            if isinstance(node, ast.Attribute):
                assert node.attr != "random", f"{path.name} uses numpy.random"
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [alias.name for alias in node.names] + [getattr(node, "module", "") or ""]
                assert not any(n.split(".")[0] in {"prefect", "polars", "pathlib", "io"} for n in names)
