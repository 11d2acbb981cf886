"""Compare a `mutmut run` of the privacy modules with the survivors file and print the mutation score.

    mutmut run --max-children 2          # all mutants of the modules in [tool.mutmut] only_mutate
    python mutation/report.py            # score, unlisted survivors (exit 1), stale entries
    python mutation/report.py --write    # also rewrite mutation/SCORE.md with the figures

A surviving mutant is identified by its function's name (without its module) and the line it changes (before and
after), not by mutmut's number nor its file, so the survivors file stays valid when code moves, within a module or
to another.  `mutation/SURVIVORS.toml` gives each
survivor a one-line reason; a reason starting with "equivalent:" removes it from the score's denominator
(it cannot be killed: no behaviour changes), any other reason keeps it counted as a survivor.  Timeouts and
crashes count as killed: the suite noticed the change.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass
from fnmatch import fnmatch
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
SURVIVORS_FILE = HERE / "SURVIVORS.toml"
SCORE_FILE = HERE / "SCORE.md"
TESTS_FILE = HERE / "tests_by_module.toml"
TARGET = 0.90
KILLED = {"killed", "timeout", "segfault", "caught by type check"}


@dataclass(frozen=True)
class Mutant:
    name: str  # mutmut's, e.g. censusdp.pipeline.dp.accounting.x_compose_zcdp__mutmut_3
    status: str

    @property
    def function(self) -> str:
        """The function or Class.method, without its module: a survivor stays listed when its function moves."""
        mangled = self.name.rpartition(".")[2]
        mangled = re.sub(r"__mutmut_\d+$", "", mangled).removeprefix("x_").removeprefix("xǁ")
        return mangled.replace("ǁ", ".")


def mutmut_results(globs: list[str] | None = None) -> list[Mutant]:
    """Every generated mutant of the mutated files (or those matching `globs`) with its status (mutants/*.meta)."""
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.stats import status_by_exit_code
    from mutmut.utils.file_utils import walk_mutatable_files

    exact = {g for g in globs or [] if "*" not in g}
    patterns = [g for g in globs or [] if "*" in g]
    found = []
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        found += [Mutant(name, status_by_exit_code[code]) for name, code in data.exit_code_by_key.items()
                  if not globs or name in exact or any(fnmatch(name, pattern) for pattern in patterns)]
    return found


def changed_lines(mutant: Mutant) -> tuple[str, str]:
    """The mutated line before and after (whitespace collapsed), from mutmut's diff of the function."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    diff = [line for line in get_diff_for_mutant(mutant.name).splitlines() if line[:3] not in ("---", "+++")]

    def side(sign: str) -> str:
        return " / ".join(" ".join(line[1:].split()) for line in diff if line.startswith(sign))

    return side("-"), side("+")


def listed_survivors() -> dict[tuple[str, str, str], str]:
    entries = []
    for path in [SURVIVORS_FILE, *sorted((HERE / "survivors").glob("*.toml"))]:
        if path.exists():
            entries += tomllib.loads(path.read_text()).get("survivor", [])
    return {(e["function"], e["before"], e["after"]): e["reason"] for e in entries}


def todo_entries(report: Report) -> str:
    """TOML stubs for the unlisted survivors, to be given a reason (or killed by a new test)."""
    return "\n".join(f"[[survivor]]  # {m.status}\nfunction = {json.dumps(m.function)}\n"
                     f"before = {json.dumps(before)}\nafter = {json.dumps(after)}\nreason = \"\"\n"
                     for m, before, after in report.unlisted)


@dataclass(frozen=True)
class Report:
    counts: Counter[str]
    equivalent: int
    accepted: int
    unlisted: list[tuple[Mutant, str, str]]
    stale: list[tuple[str, str, str]]

    @property
    def score(self) -> float:
        judged = sum(self.counts[s] for s in self.counts if s != "not checked") - self.equivalent
        return sum(self.counts[s] for s in KILLED) / judged if judged else 1.0


def build_report(mutants: list[Mutant], *, whole_run: bool) -> Report:
    listed = listed_survivors()
    counts = Counter(m.status for m in mutants)
    matched: set[tuple[str, str, str]] = set()
    unlisted, equivalent, accepted = [], 0, 0
    for mutant in mutants:
        if mutant.status in KILLED or mutant.status == "not checked":
            continue
        before, after = changed_lines(mutant)
        key = (mutant.function, before, after)
        if key not in listed:
            unlisted.append((mutant, before, after))
            continue
        matched.add(key)
        if listed[key].startswith("equivalent:"):
            equivalent += 1
        else:
            accepted += 1
    stale = sorted(set(listed) - matched) if whole_run else []
    return Report(counts, equivalent, accepted, unlisted, stale)


def render(report: Report) -> str:
    c = report.counts
    lines = [f"mutants: {sum(c.values())}  " + "  ".join(f"{status}: {n}" for status, n in sorted(c.items())),
             f"surviving and listed: {report.equivalent} equivalent, {report.accepted} accepted; "
             f"unlisted survivors: {len(report.unlisted)}",
             f"mutation score (killed / non-equivalent checked): {report.score:.1%}  (target {TARGET:.0%})"]
    for mutant, before, after in report.unlisted:
        lines.append(f"UNLISTED {mutant.status}: {mutant.name}\n    - {before}\n    + {after}")
    for function, before, after in report.stale:
        lines.append(f"stale entry (no longer survives): {function}: {before} -> {after}")
    return "\n".join(lines)


def by_module(mutants: list[Mutant]) -> str:
    """One line per module: what the sample drew from it and what became of those mutants."""
    modules: dict[str, list[Mutant]] = {}
    for mutant in mutants:
        modules.setdefault(mutant.name.split(".x")[0], []).append(mutant)
    lines = [f"{'module':<34}{'drawn':>6}{'killed':>8}{'timeout':>8}{'equivalent':>11}{'other':>6}"]
    for module, members in sorted(modules.items()):
        part = build_report(members, whole_run=False)
        killed, timeout = part.counts["killed"], part.counts["timeout"]
        other = len(members) - killed - timeout - part.equivalent
        lines.append(f"{module:<34}{len(members):>6}{killed:>8}{timeout:>8}{part.equivalent:>11}{other:>6}")
    return "\n".join(lines)


def wilson_interval(report: Report, z: float = 1.96) -> tuple[float, float]:
    """95% interval of the whole population's score from the sample's (Wilson score interval)."""
    n = sum(report.counts[s] for s in report.counts if s != "not checked") - report.equivalent
    if n == 0:
        return 0.0, 1.0
    p = report.score
    centre, half = p + z * z / (2 * n), z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5
    return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)


def read_sample(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def score_page(text: str) -> str:
    """SCORE.md: the figures, the commit they belong to, and how they were made."""
    import platform
    import subprocess
    from datetime import date

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=HERE, capture_output=True,
                           text=True).stdout.strip()
    return (f"# Mutation score of the privacy modules\n\nscored commit: {head}"
            f"{' (plus the uncommitted changes of the commit that adds this file)' if dirty else ''}\n"
            f"date: {date.today()}; machine: {platform.machine()}, {os.cpu_count()} cores; mutmut "
            f"{version('mutmut')}; command: `python mutation/run.py --write`\n\n"
            f"```\n{text}\n```\n")


def write_tests_by_module() -> None:
    """mutation/tests_by_module.toml, from mutmut's stats: which test files run each privacy module's code
    (CI narrows its test selection with it)."""
    stats = json.loads(Path("mutants/mutmut-stats.json").read_text())["tests_by_mangled_function_name"]
    by_module: dict[str, set[str]] = {}
    for function, tests in stats.items():
        module = function.rsplit(".", 1)[0].removeprefix("censusdp.").replace(".", "/") + ".py"
        by_module.setdefault(module, set()).update(t.split("::")[0] for t in tests)
    lines = ["# written by `python mutation/report.py --write` from mutmut's stats: the test files that run each",
             "# privacy module's functions (mutation/run.py --ci selects these tests only)"]
    lines += [f"{json.dumps(m)} = {json.dumps(sorted(ts))}" for m, ts in sorted(by_module.items())]
    TESTS_FILE.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite mutation/SCORE.md")
    parser.add_argument("--sample", nargs="+", metavar="GLOB",
                        help="CI: report only these mutants (mutmut globs); fail on an unlisted survivor only")
    parser.add_argument("--names-file", type=Path,
                        help="the sample of a full run (mutation/run.py writes mutants/sample.txt): score it")
    parser.add_argument("--todo", action="store_true", help="print TOML stubs for the unlisted survivors only")
    args = parser.parse_args(argv)
    drawn = read_sample(args.names_file) if args.names_file else None
    mutants = mutmut_results(args.sample or drawn)
    report = build_report(mutants, whole_run=not (args.sample or drawn))
    if args.todo:
        print(todo_entries(report))
        return 0
    text = render(report)
    if drawn:
        low, high = wilson_interval(report)
        header = [line[2:] for line in args.names_file.read_text().splitlines() if line.startswith("# ")]
        text += (f"\nscored on a stratified random sample ({header[0]}) of {len(drawn)} mutants; 95% Wilson "
                 f"interval of the score: [{low:.1%}, {high:.1%}]" + "".join(f"\n{h}" for h in header[1:]))
        text += "\n\n" + by_module(mutants)
    print(text)
    if args.write:
        SCORE_FILE.write_text(score_page(text))
        write_tests_by_module()
    if args.sample:
        checked = sum(n for status, n in report.counts.items() if status != "not checked")
        if not checked:
            print("FAILED: no mutant of the sample could be checked within the budget")
            return 2
        return 1 if report.unlisted else 0
    return 1 if report.unlisted or report.score < TARGET else 0


if __name__ == "__main__":
    sys.exit(main())
