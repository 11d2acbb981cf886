"""Real concurrent processes charging one ledger: the cap check and the charge are one atomic step.

Without it two releases started together could both see enough budget left and together spend more than the
cap (zCDP composition, Thm 19.37(i), counts both).  Processes are started with the ``spawn`` context (fresh
interpreters, no shared state), open the ledger themselves and are released together by a barrier.  Each test
runs on both backends (``ledger_location``): a SQLite file (one write lock, ``BEGIN IMMEDIATE``) and a fresh
database on a throw-away PostgreSQL server (row and advisory locks), each process with its own connections.
"""

from __future__ import annotations

import multiprocessing as mp
from fractions import Fraction
from typing import Any

from censusdp.pipeline.budget.ledger.charges import BudgetExceededError, PrivacyLedger, config_hash
from censusdp.pipeline.errors import CensusDPError

HASH = config_hash(b"concurrency")
TIMEOUT_S = 60


def _worker(location: str, index: int, rounds: list[tuple[str, str, str, str]], barrier: Any, results: Any) -> None:
    """Open the ledger, register every dataset, then per round wait at the barrier and charge once.

    A round is (dataset, cap, rho, run id); an empty run id means one of this worker's own.
    """
    try:
        barrier.wait(TIMEOUT_S)  # open and create the tables all at once too
        ledger = PrivacyLedger(location)
        for dataset, cap, _, _ in rounds:
            ledger.ensure_dataset(dataset, Fraction(cap))
    except Exception as error:  # noqa: BLE001 - reported to the parent, which fails the test
        results.put((index, "setup", f"{type(error).__name__}: {error}"))
        return
    for dataset, _, rho, run_id in rounds:
        barrier.wait(TIMEOUT_S)
        try:
            ledger.charge(dataset, run_id or f"{dataset}-w{index}", Fraction(rho), 1e-10, HASH, True)
            outcome = "charged"
        except BudgetExceededError:
            outcome = "refused"
        except CensusDPError as error:
            outcome = "duplicate" if "already been charged" in str(error) else f"CensusDPError: {error}"
        except Exception as error:  # noqa: BLE001
            outcome = f"{type(error).__name__}: {error}"
        results.put((index, dataset, outcome))


def _race(location: str, processes: int, rounds: list[tuple[str, str, str, str]]) -> dict[str, list[str]]:
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(location, i, rounds, barrier, results)) for i in range(processes)]
    for w in workers:
        w.start()
    try:
        outcomes: dict[str, list[str]] = {}
        for _ in range(processes * len(rounds)):
            _, dataset, outcome = results.get(timeout=TIMEOUT_S)
            assert dataset != "setup", outcome
            outcomes.setdefault(dataset, []).append(outcome)
        for w in workers:
            w.join(TIMEOUT_S)
            assert w.exitcode == 0
        return outcomes
    finally:
        for w in workers:
            if w.is_alive():
                w.kill()


def test_eight_processes_five_slots(ledger_location: str) -> None:
    """8 processes charge cap/5 at once, on a ledger (file or database) none of them has created yet: exactly 5
    succeed.

    A last round has all 8 charge the same run id at once: one charge, 7 refusals, budget spent once.
    """
    caps = {"pa": Fraction(1), "nj": Fraction(7, 3), "tx": Fraction(10**20 + 1, 10**19)}
    rounds = [(d, str(c), str(c / 5), "") for d, c in caps.items()] + [("ri", "1", "1/10", "one-run")]
    outcomes = _race(ledger_location, 8, rounds)
    ledger = PrivacyLedger(ledger_location)
    assert sorted(outcomes["ri"]) == ["charged"] + ["duplicate"] * 7, outcomes["ri"]
    assert ledger.spent("ri") == Fraction(1, 10)
    for dataset, cap in caps.items():
        assert sorted(outcomes[dataset]) == ["charged"] * 5 + ["refused"] * 3, outcomes[dataset]
        assert ledger.spent(dataset) == cap and ledger.remaining(dataset) == 0
        assert len(ledger.charges(dataset)) == 5


def test_two_processes_over_half(ledger_location: str) -> None:
    """Two processes charge 0.6 * cap at the same moment, several times over: exactly one wins each time."""
    PrivacyLedger(ledger_location)  # an existing ledger this time
    rounds = [(f"d{i}", "3/4", str(Fraction(3, 4) * Fraction(3, 5)), "") for i in range(5)]
    outcomes = _race(ledger_location, 2, rounds)
    ledger = PrivacyLedger(ledger_location)
    for dataset, _, rho, _ in rounds:
        assert sorted(outcomes[dataset]) == ["charged", "refused"], outcomes[dataset]
        assert ledger.spent(dataset) == Fraction(rho)
