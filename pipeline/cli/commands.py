"""The subcommands of ``censusdp``: argument definitions and handlers (plain calls into the pipeline)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from contextlib import nullcontext
from importlib import resources
from pathlib import Path

from censusdp.pipeline.config.ledger_location import LEDGER_ENV
from censusdp.pipeline.config.model import Format
from censusdp.pipeline.errors import CensusDPError

Sub = "argparse._SubParsersAction[argparse.ArgumentParser]"


def bundled_names(folder: str = "presets") -> list[str]:
    """The configurations shipped in ``censusdp.pipeline.config``'s ``presets`` or ``templates`` folder."""
    return sorted(p.name.removesuffix(".toml") for p in resources.files("censusdp.pipeline.config").joinpath(folder)
                  .iterdir() if p.name.endswith(".toml"))


def preset_text(name: str, folder: str = "presets") -> str:
    if name not in bundled_names(folder):
        raise CensusDPError(f"unknown {folder[:-1]} {name!r} (available: {', '.join(bundled_names(folder))})")
    return resources.files("censusdp.pipeline.config").joinpath(folder, f"{name}.toml").read_text()


def add_init(sub: Sub) -> None:
    p = sub.add_parser("init", help="write an editable release configuration from a preset or a template")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--preset", default="pl94", help="preset name: pl94 (default) or pl94-2020 (the 2020 "
                      "production persons configuration)")
    kind.add_argument("--template", choices=bundled_names("templates"), help="custom: a commented skeleton for a "
                      "census of your own (levels, an attribute of age bins, a strategy, a ledger) to edit")
    p.add_argument("--out", default="censusdp.toml", help="file to write (default: censusdp.toml)")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(handler=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.exists() and not args.force:
        raise CensusDPError(f"{out}: exists; use --force to overwrite")
    out.write_text(preset_text(args.template, "templates") if args.template else preset_text(args.preset))
    print(out)
    return 0


def add_synth(sub: Sub) -> None:
    p = sub.add_parser("synth", help="write a synthetic state (microdata.parquet, geography.parquet, units.parquet), "
                                      "or with --states a nation partitioned by state")
    p.add_argument("--persons", type=int, required=True,
                   help="number of persons (1,000 to 10,000,000; with --states up to 1,000,000,000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic population (default 0)")
    p.add_argument("--states", type=int,
                   help="write a nation of the first K states by FIPS code (51: the 50 states and DC), persons "
                        "shared as in the 2020 census: microdata/state=SS/part-NNNN.parquet, units/ likewise and "
                        "geography.parquet")
    p.add_argument("--piece-persons", type=int,
                   help="with --states: largest piece drawn at once, which bounds the memory (default 5,000,000)")
    p.add_argument("--out", required=True, help="output directory")
    p.set_defaults(handler=cmd_synth)


def cmd_synth(args: argparse.Namespace) -> int:
    from censusdp.pipeline.synth.nation import PIECE_PERSONS, write_synthetic_nation
    from censusdp.pipeline.synth.population import write_synthetic

    if args.states is None and args.piece_persons is not None:
        raise CensusDPError("--piece-persons needs --states")
    try:
        if args.states is None:
            files = write_synthetic(args.persons, args.seed, Path(args.out))
        else:
            piece_persons = PIECE_PERSONS if args.piece_persons is None else args.piece_persons
            files = write_synthetic_nation(args.persons, args.seed, Path(args.out), states=args.states,
                                           piece_persons=piece_persons)
    except ValueError as error:
        raise CensusDPError(str(error)) from None
    for path in (files.microdata, files.geography, files.units):
        print(path)
    return 0


def add_input_options(p: argparse.ArgumentParser) -> None:
    """The input files of a release or a check, overriding the configuration's."""
    p.add_argument("--microdata", help="microdata file or Parquet dataset folder (overrides input.path)")
    p.add_argument("--geography", help="geography file listing every lowest-level unit (overrides input.geography)")
    p.add_argument("--format", dest="fmt", choices=list(Format), help="microdata format")
    units = p.add_mutually_exclusive_group()
    units.add_argument("--units", help="the housing-unit file of the [units] universe (overrides units.path)")
    units.add_argument("--no-units", action="store_true", help="release the persons only: the configuration's "
                       "[units] universe is left out (not read, not charged)")


def add_release(sub: Sub) -> None:
    p = sub.add_parser("release", help="run a release: noisy measurements, reconciled tables, manifest")
    p.add_argument("config", help="release configuration (TOML)")
    p.add_argument("--out", help="directory that receives the run folder (default: the config's output.dir)")
    add_input_options(p)
    p.add_argument("--rho", help="total zCDP budget, e.g. 2.56 or 64/25 (overrides budget.rho)")
    p.add_argument("--runner", help='where the release\'s tasks run: "auto" (default: every core), "local", '
                   '"dask-local:N", "tcp://host:port" or "tls://host:port"')
    p.add_argument("--no-prefect", action="store_true", help="run as plain function calls, without Prefect")
    p.add_argument("--insecure-seed", type=int, help="TESTS ONLY: seeded noise; the run is marked not publishable")
    p.add_argument("--resume", metavar="RUN_ID", help="finish a run that died after its measurements were saved "
                   "(no new charge, no new noise)")
    p.set_defaults(handler=cmd_release)


def run_release_command(config: str, out: str | None, microdata: str | None, geography: str | None,
                        fmt: str | None, rho: str | None, no_prefect: bool, insecure_seed: int | None,
                        runner: str | None = None, units: str | None = None, no_units: bool = False) -> Path:
    from censusdp.pipeline.config.options import insecure_seed_allowed, load_release_config, random_source

    if insecure_seed is not None:
        print("censusdp: WARNING: --insecure-seed: noise is reproducible; this run is NOT publishable",
              file=sys.stderr)
    # the flow accepts a seed only from this call (never from a deployment parameter alone)
    with insecure_seed_allowed() if insecure_seed is not None else nullcontext():
        if no_prefect:
            from censusdp.pipeline.release.stages import run_release
            from censusdp.pipeline.uncertainty.estimates import write_release_estimates

            cfg = load_release_config(config, microdata, geography, fmt, rho, runner, units, no_units)
            root = Path(out).resolve() if out else cfg.output.dir
            return run_release(cfg, root, random_source(insecure_seed), write_estimates=write_release_estimates)
        from censusdp.flows.embedded_server import embedded_server, using
        from censusdp.flows.settings import hardened_prefect

        # the embedded server starts with the hardened settings, and while the flow's modules are imported
        with hardened_prefect(), embedded_server() as server:
            from censusdp.flows.release import run_release_flow

            with using(server):
                return Path(run_release_flow(config_path=str(Path(config).resolve()), out_dir=out,
                                             microdata=microdata, geography=geography, fmt=fmt, rho=rho,
                                             runner=runner, insecure_seed=insecure_seed, units=units,
                                             no_units=no_units))


def cmd_release(args: argparse.Namespace) -> int:
    started = time.monotonic()
    if args.resume:
        from censusdp.pipeline.config.load import load_config
        from censusdp.pipeline.release.finish import resume_release
        from censusdp.pipeline.uncertainty.estimates import write_release_estimates

        if (args.rho or args.microdata or args.geography or args.fmt or args.insecure_seed is not None
                or args.units or args.no_units):
            raise CensusDPError("--resume finishes a run with the configuration its measurements were drawn with: "
                                "only --out and --runner may be given")
        own = load_config(args.config)  # the user's own configuration says where the ledger is
        root = Path(args.out).resolve() if args.out else own.output.dir
        print(resume_release(root, args.resume, own.ledger.location, runner=args.runner,
                             write_estimates=write_release_estimates))
        return 0
    run_dir = run_release_command(args.config, args.out, args.microdata, args.geography, args.fmt, args.rho,
                                  args.no_prefect, args.insecure_seed, args.runner, args.units, args.no_units)
    print(run_dir)
    print(f"censusdp: release finished in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0


def add_check(sub: Sub) -> None:
    p = sub.add_parser("check", help="validate the input files against a configuration, naming file, column and "
                       "row of any problem (for the data curator only: no ledger, no noise)")
    p.add_argument("config", help="release configuration (TOML)")
    add_input_options(p)
    p.set_defaults(handler=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    """Every check a release makes, before and after its charge, with precise errors.  Its output names rows of
    the confidential data: only someone allowed to read the microdata may run it; deployments never expose it."""
    from censusdp.pipeline.config.options import load_release_config
    from censusdp.pipeline.errors import InputError, InputProblem
    from censusdp.pipeline.io.microdata import read_input_files, validated_rows
    from censusdp.pipeline.io.value_checks import persons_units_problem

    config = load_release_config(args.config, args.microdata, args.geography, args.fmt, units=args.units,
                                 no_units=args.no_units)
    tree, unit_index, cells = validated_rows(read_input_files(config))
    levels = ", ".join(f"{lv.name} {tree.n_nodes(i):,}" for i, lv in enumerate(config.levels))
    print(f"censusdp check: {config.input.path}: valid ({len(unit_index):,} person records; units: {levels})")
    if config.units is not None:  # the housing-unit universe's file, checked the same way
        _, unit_rows, unit_cells = validated_rows(read_input_files(config.units))
        print(f"censusdp check: {config.units.input.path}: valid ({len(unit_rows):,} unit records)")
        problem = persons_units_problem(config, tree, (unit_index, cells), (unit_rows, unit_cells))
        if problem is not None:
            raise InputError(f"{config.input.path} and {config.units.input.path}", problem,
                             category=InputProblem.PERSONS_UNITS)
    return 0


def add_demo(sub: Sub) -> None:
    p = sub.add_parser("demo", help="synthesise a small state and release it with the pl94 preset through Prefect")
    p.add_argument("--out", default="censusdp-demo", help="demo directory (default: ./censusdp-demo)")
    p.add_argument("--persons", type=int, default=20000, help="synthetic persons (default 20,000)")
    p.add_argument("--no-prefect", action="store_true", help="run without Prefect")
    p.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from censusdp.pipeline.synth.population import write_synthetic

    out = Path(args.out).resolve()
    data = out / "data"
    if data.exists():
        shutil.rmtree(data)
    try:
        files = write_synthetic(args.persons, 2020, data)
    except ValueError as error:  # the size asked for: synthetic, no confidential value
        raise CensusDPError(f"--persons: {error}") from None
    config = out / "pl94.toml"
    text = preset_text("pl94").replace('path = "microdata.parquet"', f'path = "{files.microdata}"')
    text = text.replace('geography = "geography.parquet"', f'geography = "{files.geography}"')
    if not os.environ.get(LEDGER_ENV):
        # synthetic data, regenerated on every demo: its own throw-away ledger, so that re-running the demo is
        # not refused by (and does not clutter) the installation's ledger, which is for real data
        ledger = out / "demo-ledger.sqlite"
        for leftover in (ledger, ledger.with_name(ledger.name + "-wal"), ledger.with_name(ledger.name + "-shm")):
            leftover.unlink(missing_ok=True)
        text = re.sub(r"^(\[ledger\].*)$", lambda m: f'{m.group(1)}\npath = "{ledger}"  # the demo\'s only: '
                      "wiped by the next demo, never for real data", text, count=1, flags=re.MULTILINE)
    # its own dataset, with room for any number of demos: synthetic data, never a real dataset's budget
    text = text.replace('dataset = "pl94-state"', 'dataset = "censusdp-demo"').replace('cap_rho = "10.24"',
                                                                                        'cap_rho = "1000000"')
    config.write_text(text)
    started = time.monotonic()
    run_dir = run_release_command(str(config), str(out / "runs"), None, None, None, None, args.no_prefect, None)
    from censusdp.pipeline.uncertainty.estimates import write_estimates

    write_estimates(run_dir)  # error bars for every published count: post-processing of public values
    manifest = json.loads((run_dir / "manifest.json").read_text())
    privacy = manifest["privacy"]
    print(f"censusdp demo: {args.persons:,} synthetic persons released in {time.monotonic() - started:.1f} s: "
          f"rho = {privacy['rho_exact']}, epsilon = {privacy['epsilon']:.3f} at delta = {privacy['delta']:g}"
          + (f"; housing units rho = {manifest['units']['privacy']['rho_exact']}; per person, with the units, rho = "
             f"{privacy['per_person']['rho_exact']} (epsilon = {privacy['per_person']['epsilon']:.3f}), as charged"
             if "per_person" in privacy else ""), file=sys.stderr)
    print(run_dir)
    return 0


def add_postprocess(sub: Sub) -> None:
    p = sub.add_parser("postprocess", help="re-run reconciliation and rounding from a run's saved measurements "
                       "(no microdata, no budget)")
    p.add_argument("run_dir", help="a published run folder")
    p.add_argument("--out", help="directory that receives the new run folder (default: beside RUN_DIR)")
    p.add_argument("--solver", help='"auto" or a cvxpy solver name (e.g. CLARABEL, OSQP, SCS)')
    p.add_argument("--runner", help='"auto" (every core), "local", "dask-local:N", "tcp://host:port" or "tls://host:port"')
    p.add_argument("--reconciliation", choices=["full_information", "level_by_level"],
                   help="what each level fits: the tree's GLS estimates (the default) or its own measurements")
    p.add_argument("--ledger", help="the ledger the run was charged to, a file or postgresql:// URL (default: "
                   "$CENSUSDP_LEDGER, else the installation's ledger in the user data directory)")
    p.set_defaults(handler=cmd_postprocess)


def cmd_postprocess(args: argparse.Namespace) -> int:
    from censusdp.pipeline.release.finish import postprocess_run
    from censusdp.pipeline.uncertainty.estimates import write_release_estimates

    out = Path(args.out).resolve() if args.out else None
    print(postprocess_run(Path(args.run_dir), out, args.solver, args.runner, args.ledger,
                          write_estimates=write_release_estimates, reconciliation=args.reconciliation))
    return 0


def add_serve(sub: Sub) -> None:
    p = sub.add_parser("serve", help="serve the release flow as a Prefect deployment on a cron schedule")
    p.add_argument("config", help="release configuration (TOML)")
    p.add_argument("--cron", required=True, help='cron schedule, e.g. "0 2 * * *"')
    p.add_argument("--name", default="scheduled", help="deployment name (default: scheduled)")
    p.add_argument("--out", help="directory that receives the run folders (default: the config's output.dir)")
    p.set_defaults(handler=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from censusdp.flows.serve import serve

    serve(args.config, args.cron, args.name, args.out)
    return 0


def add_verify(sub: Sub) -> None:
    p = sub.add_parser("verify", help="recompute every promise a published run makes from its published files "
                       "(docs/verify.md): exit 1 if any rule is broken, 2 if a file is missing or unreadable")
    p.add_argument("run_dir", help="a published run folder")
    p.set_defaults(handler=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    """One line per rule and level: how many checked items break it (never a count of the tables)."""
    from censusdp.pipeline.io.verify import verify_run

    try:
        checks = verify_run(Path(args.run_dir))
    except CensusDPError as error:
        print(f"censusdp: error: {error}", file=sys.stderr)
        return 2
    for check in checks:
        level = f"  [{check.level}]" if check.level is not None else ""
        print(f"{check.violations} violations  {check.rule}{level}  ({check.checked} checked)")
    broken = sum(check.violations > 0 for check in checks)
    print(f"censusdp verify: {len(checks)} rules checked, {broken} with violations", file=sys.stderr)
    return 1 if broken else 0
