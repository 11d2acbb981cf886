"""``censusdp budget``: ``show`` (the default) a configuration's allocation or convert rho <-> (epsilon, delta),
and ``optimize`` the shares for the user's areas or for weights.  Neither touches microdata nor spends budget."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from censusdp.pipeline.cli.commands import Sub
from censusdp.pipeline.errors import CensusDPError

SUBCOMMANDS = ("show", "optimize")


def default_subcommand(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``show`` after ``budget`` when no budget subcommand (nor help) follows it."""
    out = list(argv)
    command = next((i for i, word in enumerate(out) if not word.startswith("-")), None)
    if command is not None and out[command] == "budget":
        following = out[command + 1:command + 2]
        if not following or following[0] not in (*SUBCOMMANDS, "-h", "--help"):
            out.insert(command + 1, "show")
    return out


def add_budget(sub: Sub) -> None:
    p = sub.add_parser("budget", help="show a configuration's budget, convert between rho and (epsilon, delta), "
                       "or optimise the shares (touches no data)")
    commands = p.add_subparsers(dest="budget_command", required=True, metavar="{show,optimize}")
    show = commands.add_parser("show", help="a configuration's allocation and accounting, or a conversion "
                               "(the default: censusdp budget CONFIG)")
    show.add_argument("config", nargs="?", help="release configuration (TOML)")
    show.add_argument("--rho", help="zCDP rho to convert to (epsilon, delta)")
    show.add_argument("--epsilon", help="target epsilon: print the largest rho that meets it at --delta")
    show.add_argument("--delta", help="delta (default: the config's, else 1e-10)")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(handler=cmd_budget_show)
    optimize = commands.add_parser("optimize", help="level (and query) shares minimising the expected error of "
                                   "your areas (--areas) or a weighted variance (--weights); prints before and after")
    optimize.add_argument("config", help="release configuration (TOML)")
    target = optimize.add_mutually_exclusive_group(required=True)
    target.add_argument("--areas", action="append", metavar="FILE",
                        help="a block-assignment file of the areas you will publish (as censusdp areas --assign); "
                        "repeat for several plans")
    target.add_argument("--weights", help='"LEVEL:QUERY=W,..." (* for any) or a TOML file')
    optimize.add_argument("--max-growth", action="append", metavar="F|LEVEL=F", default=[],
                          help="with --areas: no level's expected error of any report variable may grow by more "
                          "than this factor (default 1.25; LEVEL=F for one level)")
    optimize.add_argument("--query-shares", action="store_true",
                          help="with --areas: also choose each level's query shares")
    optimize.add_argument("--geography", help="with --areas: the geography file (default: the configuration's)")
    optimize.add_argument("--write", metavar="FILE", help="write the optimised configuration here (with --areas, "
                          "and its table of expected errors as FILE's stem + -errors.csv)")
    optimize.set_defaults(handler=cmd_budget_optimize)


def cmd_budget_show(args: argparse.Namespace) -> int:
    from censusdp.pipeline.budget.summary import budget_command

    print(budget_command(args.config, args.rho, args.epsilon, args.delta, args.json))
    return 0


def cmd_budget_optimize(args: argparse.Namespace) -> int:
    """Print the optimised shares and the weighted expected variance before and after."""
    from censusdp.pipeline.budget.optimize import optimize_budget

    if args.areas:
        from censusdp.pipeline.uncertainty.design_report import optimize_for_areas, summary_lines

        result = optimize_for_areas(args.config, args.areas, max_growth=args.max_growth,
                                    with_queries=args.query_shares, geography=args.geography, out_path=args.write)
        print("\n".join(summary_lines(result)))
        return 0
    if args.max_growth or args.query_shares or args.geography:
        raise CensusDPError("budget optimize: --max-growth, --query-shares and --geography go with --areas")
    if not args.weights:
        raise CensusDPError("budget optimize: --weights must not be empty")
    result = optimize_budget(args.config, args.weights, args.write)
    print("level shares: " + ", ".join(f"{k}={v}" for k, v in result["level_shares"].items()))
    for key, share in result["query_shares"].items():
        print(f"  {key} = {share}  (weight {result['weights'][key]:g})")
    print(f"weighted expected variance Σ w·σ²: before {result['before']:.6g}, after {result['after']:.6g} "
          f"(bound without floors or rounding {result['optimum']:.6g})")
    if result["path"]:
        print(result["path"])
    return 0
