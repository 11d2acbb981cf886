"""Two versions' post-processing on the same noisy measurements: accuracy with the noise held fixed (paired).

    python benchmarks/same_noise.py --data DATA --preset pl94 --seeds 11 21 22 --other /tmp/base --out results.json

Releases of independent seeds differ mostly by their noise (a block group's MAE moves by a few percent from draw to
draw), which hides what a change of the reconciliation does.  Here each seed's release is made by this version;
a copy of its run folder is then re-reconciled by the other version's ``postprocess`` (its source folder first on
PYTHONPATH), from the very same measurements.  The copy's manifest loses the configuration keys the other version
does not know (``--drop``), and the other version's check that the recorded configuration is the one charged is
bypassed for that copy only: the edit is the point, and the copy is never published.  Prints, per level, the MAE
of the total population (P1_001N) and of the occupied housing units (H1_002N) of both, against the truth.

The shim below drives a version that imports as ``pipeline`` (before the ``censusdp.*`` namespace).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from persons_units import published, truth
from real_data import LEVEL_ORDER, release

# the other version's postprocess, with its ledger's configuration check bypassed (benchmark copies only)
SHIM = """
import dataclasses, sys
import pipeline.release.finish as finish
finish.config_digest = lambda raw: "0" * 64
class Ledger(finish.PrivacyLedger):
    def charge_of(self, run_id):
        charge = super().charge_of(run_id)
        return None if charge is None else dataclasses.replace(charge, config_hash="0" * 64)
finish.PrivacyLedger = Ledger
from pipeline.cli import main
sys.exit(main(["-q", "postprocess", sys.argv[1], "--out", sys.argv[2], "--ledger", sys.argv[3]]))
"""


def maes(run: Path, data: Path) -> dict[str, dict[str, float]]:
    out = {}
    for level in LEVEL_ORDER:
        joined = published(run, level).join(truth(data, level), on="GEOID", how="left").fill_null(0)
        out[level] = {"P1_001N": float((joined["P1_001N"] - joined["true_pop"]).abs().mean())}
        if "H1_002N" in joined.columns and "true_occupied" in joined.columns:
            out[level]["H1_002N"] = float((joined["H1_002N"] - joined["true_occupied"]).abs().mean())
    return out


def other_version(run: Path, folder: Path, other: Path, drop: list[str]) -> Path:
    copy = folder / "copy"
    shutil.copytree(run, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    for dotted in drop:
        *path, last = dotted.split(".")
        table = manifest["config_raw"]
        for key in path:
            table = table.get(key, {})
        table.pop(last, None)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    out = folder / "other"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(other)}
    subprocess.run([sys.executable, "-c", SHIM, str(copy), str(out), str(folder / "ledger.sqlite")], env=env,
                   check=True)
    (published_run,) = out.iterdir()
    return published_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--preset", default="pl94")
    parser.add_argument("--seeds", type=int, nargs="+", default=[11, 21, 22, 23, 24, 25])
    parser.add_argument("--other", type=Path, required=True, help="the other version's source folder")
    parser.add_argument("--drop", nargs="*", default=["units.persons_per_unit"],
                        help="configuration keys the other version does not know (dotted)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    data = args.data.resolve()
    results = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            run = release(data, args.preset, folder, seed)
            results.append({"seed": seed, "this": maes(run, data),
                            "other": maes(other_version(run, folder, args.other.resolve(), args.drop), data)})
    args.out.write_text(json.dumps(results, indent=1))
    for level in LEVEL_ORDER:
        for query in ("P1_001N", "H1_002N"):
            pairs = [(r["this"][level][query], r["other"][level][query]) for r in results
                     if query in r["this"][level] and query in r["other"][level]]
            if pairs:
                this, other = (sum(p[i] for p in pairs) / len(pairs) for i in (0, 1))
                ratio = f"{this / other:.4f}" if other else "-"
                print(f"{level:12} {query}: other {other:.3f}  this {this:.3f}  ratio {ratio}  "
                      f"(this worse in {sum(a > b for a, b in pairs)} of {len(pairs)})")


if __name__ == "__main__":
    main()
