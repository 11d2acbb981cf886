"""The ``censusdp`` command.  Errors are one line on stderr and a non-zero exit, never a traceback.

Unexpected exceptions are reported by type only (their text could carry data values); CENSUSDP_DEBUG=1 shows the
traceback on a machine where that is safe."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Sequence

from censusdp.pipeline.errors import CensusDPError
from censusdp.postprocess import ReconciliationError

EXIT_ERROR, EXIT_INTERNAL = 1, 3


def build_parser() -> argparse.ArgumentParser:
    from censusdp.pipeline.cli import commands
    from censusdp.pipeline.cli.budget import add_budget
    from censusdp.pipeline.cli.evaluate import add_evaluate
    from censusdp.pipeline.cli.ledger import add_ledger
    from censusdp.pipeline.cli.uncertainty import add_areas, add_uncertainty

    parser = argparse.ArgumentParser(prog="censusdp", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors on stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (commands.add_init, commands.add_synth, commands.add_check, commands.add_release, add_budget,
                commands.add_demo, commands.add_postprocess, commands.add_verify, commands.add_serve, add_ledger,
                add_evaluate, add_uncertainty, add_areas):  # in the order --help lists them
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from censusdp.pipeline.cli.budget import default_subcommand

    parser = build_parser()
    args = parser.parse_args(default_subcommand(sys.argv[1:] if argv is None else argv))
    logger = logging.getLogger("censusdp")  # ours only: other libraries' loggers keep their own settings
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("censusdp: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(logging.WARNING if args.quiet else logging.INFO)
    try:
        return int(args.handler(args) or 0)
    except CensusDPError as error:
        print(f"censusdp: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except ReconciliationError as error:  # its messages carry sizes and statuses only, never data values
        print(f"censusdp: error: reconciliation failed, nothing was published: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("censusdp: interrupted; nothing was published", file=sys.stderr)
        return 130
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as error:  # noqa: BLE001 - the last line of defence (a polars panic is a BaseException)
        if os.environ.get("CENSUSDP_DEBUG") == "1":
            traceback.print_exc()
        print(f"censusdp: internal error ({type(error).__name__}); nothing was published. "
              "Set CENSUSDP_DEBUG=1 for a traceback.", file=sys.stderr)
        return EXIT_INTERNAL
