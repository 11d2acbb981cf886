"""``censusdp budget``: ``show`` (the default) a configuration's allocation or convert rho <-> (epsilon, delta),
and ``optimize`` the shares for weights.  Neither touches data nor spends budget."""

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
    optimize = commands.add_parser("optimize", help="level and query shares minimising the weighted expected "
                                   "variance; prints before and after")
    optimize.add_argument("config", help="release configuration (TOML)")
    optimize.add_argument("--weights", required=True, help='"LEVEL:QUERY=W,..." (* for any) or a TOML file')
    optimize.add_argument("--write", metavar="FILE", help="write the optimised configuration here")
    optimize.set_defaults(handler=cmd_budget_optimize)


def cmd_budget_show(args: argparse.Namespace) -> int:
    from censusdp.pipeline.budget.summary import budget_command

    print(budget_command(args.config, args.rho, args.epsilon, args.delta, args.json))
    return 0


def cmd_budget_optimize(args: argparse.Namespace) -> int:
    """Print the optimised shares and the weighted expected variance before and after."""
    from censusdp.pipeline.budget.optimize import optimize_budget

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
