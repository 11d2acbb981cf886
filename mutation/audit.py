"""The mutants an audit planted by hand: apply each, run the test meant to catch it, revert.

    python mutation/audit.py            # every one must make its test fail; exit 1 if one survives

Each entry replaces one exact piece of source text (it must occur once) and names the test that must then fail.
The file is restored whatever happens (also on Ctrl-C).
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class PlantedMutant:
    what: str
    path: str
    before: str
    after: str
    test: str


PLANTED = (
    PlantedMutant("a quarter of the noise variance where a release draws its measurements",
                  "pipeline/release/noisy_measurements.py",
                  "sample_discrete_gaussian(sigma2, answers.size",
                  "sample_discrete_gaussian(sigma2 / 4, answers.size",
                  "tests/release/test_calibration.py"),
    PlantedMutant("the parametric bootstrap without noise", "pipeline/uncertainty/bootstrap.py",
                  "noisy = noisy_answers(answers, q.mechanism, q.sigma2, q.scale, rng)",
                  "noisy = answers + 0 * noisy_answers(answers, q.mechanism, q.sigma2, q.scale, rng)",
                  "tests/uncertainty/test_bootstrap_calibration.py"),
    PlantedMutant("the flow's insecure-seed guard removed", "flows/release.py",
                  "if insecure_seed is not None and not insecure_seed_is_allowed():", "if False:",
                  "tests/flows/test_flow_parameters.py::test_the_flow_refuses_a_seed_it_was_not_given_by_the_cli"),
    PlantedMutant("the hardened Prefect settings emptied", "flows/settings.py",
                  "return {f\"{section}.{key}\": value", "return {} and {f\"{section}.{key}\": value",
                  "tests/flows/test_flow.py::test_release_through_prefect_publishes_and_leaks_nothing"),
    PlantedMutant("unexpected errors reach Prefect with their text", "pipeline/errors.py",
                  "    @functools.wraps(stage)\n    def guarded",
                  "    return stage\n\n    @functools.wraps(stage)\n    def guarded",
                  "tests/release/test_refusals.py::test_unexpected_errors_reach_prefect_by_type_only"),
    PlantedMutant("`-p rho=1.5` (a JSON number) refused by the deployment", "flows/release.py",
                  "rho: str | int | float | None = None", "rho: str | None = None",
                  "tests/flows/test_flow_parameters.py::test_the_deployment_takes_rho_as_the_readme_writes_it"),
)


def run_planted(mutant: PlantedMutant) -> tuple[bool, float]:
    """(killed, seconds): apply, run the test, revert."""
    path = REPO / mutant.path
    original = path.read_text()
    assert original.count(mutant.before) == 1, f"{mutant.path}: the text to replace must occur once"
    started = time.monotonic()
    try:
        path.write_text(original.replace(mutant.before, mutant.after))
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", mutant.test],
                              cwd=REPO, capture_output=True, text=True)
    finally:
        path.write_text(original)
    return done.returncode != 0, time.monotonic() - started


def main() -> int:
    survived = 0
    for mutant in PLANTED:
        killed, seconds = run_planted(mutant)
        survived += not killed
        print(f"{'killed  ' if killed else 'SURVIVED'} {seconds:5.0f} s  {mutant.what}  ({mutant.path}; {mutant.test})")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
