"""What Prefect adds to a small release: `censusdp release` with and without `--no-prefect`, alternated, on one
synthetic state, each run a fresh command (as a user runs it) with a ledger of its own.

    python benchmarks/orchestration.py --persons 20000 --rounds 3 [--other OLD_SRC]

The Prefect home is the benchmark's own: the first Prefect run of each code migrates its database and (from the
warm-server code on) starts its server, and is reported apart as the cold run; the rounds after it are a warm
installation.  ``--other`` times another checkout the same way, interleaved (its parent folder holding
``censusdp/`` on PYTHONPATH, as for the other benchmarks).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--other", type=Path, help="another checkout's parent folder (PYTHONPATH), timed alike")
    parser.add_argument("--other-cli", default="censusdp.pipeline.cli",
                        help="its command-line module (before the censusdp namespace: pipeline.cli)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        subprocess.run([sys.executable, "-m", "censusdp.pipeline.cli", "-q", "synth", "--persons", str(args.persons),
                        "--seed", "3", "--out", str(folder / "data")], check=True, stdout=subprocess.DEVNULL)
        codes = {"this": None, **({"other": args.other} if args.other else {})}
        cli = {"this": "censusdp.pipeline.cli", "other": args.other_cli}
        for name, source in codes.items():  # each code's own preset (a configuration may outgrow an older reader)
            env = {**os.environ, **({"PYTHONPATH": str(source)} if source is not None else {})}
            subprocess.run([sys.executable, "-m", cli[name], "-q", "init", "--out",
                            str(folder / "data" / f"pl94-{name}.toml")], check=True, stdout=subprocess.DEVNULL, env=env)
        homes = {name: folder / f"prefect-home-{name}" for name in codes}
        times: dict[tuple[str, str], list[float]] = {}
        cold: dict[str, float] = {}
        for round_ in range(args.rounds + 1):
            for name, source in codes.items():
                env = {**os.environ, "PREFECT_HOME": str(homes[name]),
                       "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
                env.pop("PREFECT_API_URL", None)
                if source is not None:
                    env["PYTHONPATH"] = str(source)
                for mode in ("prefect", "no-prefect"):
                    env["CENSUSDP_LEDGER"] = str(folder / f"ledger-{name}-{mode}-{round_}.sqlite")
                    command = [sys.executable, "-m", cli[name], "-q", "release",
                               str(folder / "data" / f"pl94-{name}.toml"), "--out", str(folder / "runs")]
                    seconds = timed(command + (["--no-prefect"] if mode == "no-prefect" else []), env)
                    if round_ == 0 and mode == "prefect":
                        cold[name] = seconds
                    elif round_ > 0:
                        times.setdefault((name, mode), []).append(seconds)
        print(f"persons={args.persons:,} rounds={args.rounds} (after one cold round)")
        print("| code | cold Prefect run (s) | Prefect, warm (s) | --no-prefect (s) | Prefect adds (s, median) |")
        print("|---|---|---|---|---|")
        for name in codes:
            with_prefect, without = times[(name, "prefect")], times[(name, "no-prefect")]
            added = statistics.median(w - o for w, o in zip(with_prefect, without, strict=True))
            print(f"| {name} | {cold[name]:.1f} | {', '.join(f'{s:.1f}' for s in with_prefect)} | "
                  f"{', '.join(f'{s:.1f}' for s in without)} | {added:.1f} |")
        from censusdp.flows.embedded_server import stop_embedded_server

        stop_embedded_server(homes["this"])  # the warm server of this benchmark's home ends with it


if __name__ == "__main__":
    main()
