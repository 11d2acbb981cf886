"""Run mutmut on the privacy modules: the whole set (the score in SCORE.md) or CI's bounded sample.

    python mutation/run.py                 # a random sample of the mutants (--fraction, --size, --seed)
    python mutation/run.py --fraction 1 --write   # every mutant of [tool.mutmut] only_mutate (hours on 2 cores),
                                                  # then SCORE.md and tests_by_module.toml rewritten
    python mutation/run.py --functions 'censusdp.pipeline.dp.pld.x__power__mutmut_*'   # one function's mutants
    python mutation/run.py --ci            # CI: the functions of privacy modules changed since the scored
                                           # commit (or, when none changed, a few drawn at random), in a copy
                                           # of the checkout with the test selection narrowed to their tests

Both start one throw-away PostgreSQL server for the whole run ($CENSUSDP_TEST_POSTGRES_URL), so the forked
test runs of each mutant do not each start their own.  In --ci mode a mutant that survives and is not listed in
mutation/survivors/*.toml fails the job (exit 1), and so does a sample of which no mutant could be checked; the sample
is bounded by --max-functions and --budget-s.

mutmut names a mutant after its file's path and the tests import the code as ``censusdp.*``, so every mode runs
mutmut in a copy of the checkout with the stage folders under ``censusdp/`` (their import names).
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import tomli_w

REPO = Path(__file__).resolve().parent.parent
NOTHING_CHECKED = 2  # report.py's exit status when no mutant of a sample could be checked
STAGES = ("pipeline", "flows", "geography", "postprocess")  # installed as censusdp.<stage>
sys.path.insert(0, str(REPO))


def mutated_modules(root: Path = REPO) -> list[str]:
    return tomllib.loads((root / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]


def functions_of(path: Path, lines: set[int] | None = None) -> list[str]:
    """mutmut's glob for each top-level function and method it mutates in a module (those touching `lines`, if
    given)."""
    module = ".".join(("censusdp", *path.with_suffix("").parts))
    source = (REPO / path).read_text()
    tree, text = ast.parse(source), source.splitlines()
    globs = []
    for node in tree.body:
        members = [(node, "")] if isinstance(node, ast.FunctionDef) else []
        if isinstance(node, ast.ClassDef):
            members = [(m, node.name) for m in node.body if isinstance(m, ast.FunctionDef)]
        for function, owner in members:
            if any(not (isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod"))
                   for d in function.decorator_list):
                continue  # mutmut leaves decorated functions alone
            if lines is not None and not lines & code_lines(function, text):
                continue
            name = f"xǁ{owner}ǁ{function.name}" if owner else f"x_{function.name}"
            globs.append(f"{module}.{name}__mutmut_*")
    return globs


def code_lines(function: ast.FunctionDef, text: list[str]) -> set[int]:
    """The function's lines that mutmut can mutate: not its docstring, a comment line or a blank one (a change to
    those alone makes no new mutant)."""
    lines = set(range(function.lineno, (function.end_lineno or 0) + 1))
    first = function.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines -= set(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return {n for n in lines if text[n - 1].strip() and not text[n - 1].strip().startswith("#")}


def scored_commit() -> str | None:
    score = REPO / "mutation" / "SCORE.md"
    match = re.search(r"scored commit: ([0-9a-f]{40})", score.read_text()) if score.exists() else None
    return match.group(1) if match else None


def renamed_from(base: str) -> dict[str, str]:
    """New path -> path at ``base`` for the files git sees as moved since then (a move alone changes no line)."""
    out = subprocess.run(["git", "diff", "-M", "--name-status", base, "HEAD"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    return {parts[2]: parts[1] for parts in (line.split("\t") for line in out.splitlines())
            if parts[0].startswith("R") and len(parts) == 3}


def changed_lines(base: str, path: str, renamed: dict[str, str]) -> set[int]:
    """Lines of ``path`` changed since ``base`` (``renamed``: ``renamed_from(base)``, read once per run)."""
    old = renamed.get(path, path)
    diff = subprocess.run(["git", "diff", "-U0", "-M", base, "HEAD", "--", old, path], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout
    lines: set[int] = set()
    for start, count in re.findall(r"^@@ -\S+ \+(\d+)(?:,(\d+))? @@", diff, flags=re.M):
        lines |= set(range(int(start), int(start) + int(count or 1)))
    return lines


def ci_sample(max_functions: int) -> tuple[list[str], bool]:
    """Functions changed since the scored commit, True; when none, a draw seeded by the commit (varies per
    commit), False."""
    base = scored_commit()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    changed: list[str] = []
    if base and subprocess.run(["git", "cat-file", "-e", base], cwd=REPO).returncode == 0:
        renamed = renamed_from(base)
        for path in mutated_modules():
            changed += functions_of(Path(path), changed_lines(base, path, renamed))
    draw = random.Random(head or "no-git")
    pool = changed or [g for path in mutated_modules() for g in functions_of(Path(path))]
    print(f"mutation sample: {len(changed)} changed functions since {base or 'no scored commit'}; "
          f"testing {min(max_functions, len(pool))} of {len(pool)}")
    return sorted(draw.sample(pool, min(max_functions, len(pool)))), bool(changed)


def own_tests(module: str, mapped: list[str]) -> list[str]:
    """The module's own test files among those that run it: in the test folder mirroring its package, those named
    after it (tests/dp/test_cdf*.py for pipeline/dp/cdf.py), else the whole folder (tests/budget/ledger/ for
    pipeline/budget/ledger/charges.py).  The releases that also run it take minutes, CI's budget is a few; the
    full run keeps every test."""
    path = Path(module)
    folder = Path("tests", *path.parent.parts[1:])
    mirrored = [t for t in mapped if Path(t).parent == folder]
    return [t for t in mirrored if Path(t).stem.startswith(f"test_{path.stem}")] or mirrored or mapped


def module_path(glob: str) -> str:
    """The repository path of the module a mutmut glob names (censusdp.pipeline.dp.cdf.x_... -> pipeline/dp/cdf.py)."""
    return glob.split(".x")[0].removeprefix("censusdp.").replace(".", "/") + ".py"


def staged_copy(modules: list[str], tests: list[str] | None = None) -> Path:
    """The checkout copied as mutmut must see it (the stage folders under censusdp/), with only ``modules`` mutated
    and, given, only ``tests`` selected."""
    copy = Path(tempfile.mkdtemp(prefix="censusdp-mutation-")) / "repo"
    tracked = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.split()
    for name in tracked:
        if (REPO / name).is_file():
            target = copy / "censusdp" / name if name.split("/")[0] in STAGES else copy / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target)
    project = tomllib.loads((copy / "pyproject.toml").read_text())
    settings = project["tool"]["mutmut"]
    settings["source_paths"] = ["censusdp/"]
    settings["only_mutate"] = [f"censusdp/{m}" for m in modules]
    if tests is not None:
        settings["pytest_add_cli_args_test_selection"] = tests
    (copy / "pyproject.toml").write_text(tomli_w.dumps(project))
    (copy.parent / "shared").symlink_to(REPO.parent / "shared")  # the tests find ../shared next to the checkout
    return copy


def narrowed_copy(globs: list[str]) -> Path:
    """A staged copy with only the sampled modules mutated and only their tests selected."""
    modules = sorted({module_path(g) for g in globs})
    tests_by_module = tomllib.loads((REPO / "mutation" / "tests_by_module.toml").read_text())
    tests = sorted({t for m in modules for t in own_tests(m, tests_by_module.get(m, []))})
    return staged_copy(modules, tests)


def with_test_server(argvs: list[list[str]], cwd: Path, budget_s: float | None = None) -> None:
    """Run the commands with one private PostgreSQL server shared by every forked test run."""
    from tests.helpers.postgres import _PrivateServer

    server = _PrivateServer()
    env = dict(os.environ)
    try:
        env["CENSUSDP_TEST_POSTGRES_URL"] = server.start().admin
        for argv in argvs:
            try:
                subprocess.run(argv, cwd=cwd, env=env, timeout=budget_s)
            except subprocess.TimeoutExpired:
                print(f"mutation: the {budget_s:.0f} s budget ran out; reporting the mutants checked so far")
    finally:
        server.stop()


def stratified_sample(fraction: float, seed: int, copy: Path) -> list[str]:
    """The same fraction of every module's mutants (generated in ``copy``), drawn uniformly (at least one per
    module)."""
    from mutation.report import mutmut_results

    os.chdir(copy)  # mutmut reads its mutants from the working directory
    by_module: dict[str, list[str]] = {}
    for mutant in mutmut_results():
        by_module.setdefault(mutant.name.split(".x")[0], []).append(mutant.name)
    draw = random.Random(seed)
    return sorted(name for names in by_module.values()
                  for name in draw.sample(sorted(names), max(1, round(fraction * len(names)))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ci", action="store_true", help="CI's bounded sample instead of every mutant")
    parser.add_argument("--functions", nargs="+", metavar="GLOB", help="these functions' mutants (mutmut globs, "
                        "e.g. censusdp.pipeline.dp.pld.x__power__mutmut_*) in a narrowed copy, as --ci does; exit 1 "
                        "on an unlisted survivor")
    parser.add_argument("--max-functions", type=int, default=4)
    parser.add_argument("--budget-s", type=float, default=300.0, help="wall-clock limit of the --ci mutmut run")
    parser.add_argument("--fraction", type=float, default=0.2, help="share of every module's mutants to run")
    parser.add_argument("--size", type=int, default=250, help="then this many of those, drawn uniformly (0: all)")
    parser.add_argument("--seed", type=int, default=20261201, help="seed of both draws")
    parser.add_argument("--write", action="store_true", help="then rewrite mutation/SCORE.md and tests_by_module.toml")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the PostgreSQL server on the way out
    mutmut = [str(Path(sys.executable).with_name("mutmut")), "run", "--max-children", str(os.cpu_count() or 2)]
    report = [sys.executable, str(REPO / "mutation" / "report.py")]  # run in the copy: SCORE.md is the checkout's
    if args.ci or args.functions:
        globs, changed = (args.functions, True) if args.functions else ci_sample(args.max_functions)
        copy = narrowed_copy(globs)
        with_test_server([[*mutmut, *globs]], copy, args.budget_s if args.ci else None)
        code = subprocess.run([*report, "--sample", *globs], cwd=copy).returncode
        # a change must not bring unlisted survivors; functions drawn at random only report (the whole run's
        # survivors are tracked in SCORE.md and survivors/); a sample of which nothing was checked fails either way
        return code if changed or code == NOTHING_CHECKED else 0
    copy = staged_copy(mutated_modules())
    if args.fraction >= 1:
        with_test_server([mutmut], copy)
        return subprocess.run([*report, *argv_write(args)], cwd=copy).returncode
    # generate the mutants and collect stats (mutmut then stops: the name matches nothing), draw, run the draw
    with_test_server([[*mutmut, "censusdp-generate-only"]], copy)
    names = stratified_sample(args.fraction, args.seed, copy)
    if args.size:
        names = sorted(random.Random(args.seed).sample(names, min(args.size, len(names))))
    sample_file = copy / "mutants" / "sample.txt"
    sample_file.write_text(f"# fraction {args.fraction} (seed {args.seed}), then {len(names)} of those drawn uniformly "
                           f"(seed {args.seed})\n" + "\n".join(names) + "\n")
    started = time.monotonic()
    with_test_server([[*mutmut, *names]], copy)
    with sample_file.open("a") as sample:
        sample.write(f"# wall time of the sample's mutmut run: {time.monotonic() - started:.0f} s "
                     f"({os.cpu_count()} cores)\n")
    return subprocess.run([*report, "--names-file", str(sample_file), *argv_write(args)], cwd=copy).returncode


def argv_write(args: argparse.Namespace) -> list[str]:
    return ["--write"] if args.write else []

if __name__ == "__main__":
    sys.exit(main())
