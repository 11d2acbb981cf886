"""The ``charge`` stage: the release's rho charged to its data's dataset before any noise is drawn."""

from __future__ import annotations

import json
import logging
from fractions import Fraction

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger, config_digest, config_hash
from censusdp.pipeline.config.ledger_location import prepare_location, public_config_raw
from censusdp.pipeline.config.model import ReleaseConfig
from censusdp.pipeline.io import manifest as mf
from censusdp.pipeline.io.fingerprint import data_fingerprints, seeded_noise_secret
from censusdp.pipeline.release.run import Release, stage_output
from censusdp.pipeline.release.runner import DaskRunner, LocalRunner, records_on_workers

log = logging.getLogger("censusdp")


def charge(release: Release, runner: LocalRunner | DaskRunner | None = None) -> None:
    """Charge the release's total rho to its data's dataset, atomically, before any noise is drawn (docs/ledger.md).
    The dataset is found by the data's keyed content fingerprints, whatever ``ledger.dataset`` says.  Refused past
    its lifetime cap; never refunded: composition (Thm 19.37(i)) counts every noisy measurement drawn."""
    config = release.config
    prepare_location(config.ledger.location)
    ledger = PrivacyLedger(config.ledger.location)
    key = ledger.fingerprint_key()
    # the guarantee is stated before anything is spent (an accountant failing later would waste the charge), and
    # first: a local cluster's workers boot meanwhile
    stated = release.privacy[config.universe]
    rho = Fraction(stated.get("per_person", stated)["rho_exact"])
    map_parts = runner.map if runner is not None and records_on_workers(config, runner) else None
    fingerprints: dict[str, str] = {}
    for universe in release.universes:  # the units file is the dataset's too: either file finds it, one charge
        files = stage_output(universe.input_files, "the input files (read_files)")
        prefix = "" if universe is release.persons else f"{universe.config.universe.value}-"
        fingerprints |= {f"{prefix}{kind}": digest
                         for kind, digest in data_fingerprints(files, key, map_parts=map_parts).items()}
    release.rng.bind(seeded_noise_secret(key, fingerprints, _layout(config)))  # a test seed must not predict noise
    entry = ledger.charge_release(config.ledger.dataset, config.ledger.cap_rho, fingerprints, release.run_id, rho,
                                  config.budget.delta, config_digest(config.raw), release.rng.publishable)
    release.ledger, release.dataset = ledger, entry.dataset
    if entry.dataset != config.ledger.dataset:
        warnings = release.persons.warnings
        warnings.append(f"the data is dataset {entry.dataset!r} in the ledger (the configuration names "
                        f"{config.ledger.dataset!r}): charged to {entry.dataset!r}, under its lifetime cap")
        log.warning(warnings[-1])
    log.info("charged rho = %s to dataset %s (remaining %s)", rho, entry.dataset, ledger.remaining(entry.dataset))


def _layout(config: ReleaseConfig) -> str:
    """A digest of what decides which count each draw lands on: the configuration as applied (not its solver or
    runner), the geography file and the code version (``pipeline.io.fingerprint.seeded_noise_secret``)."""
    placement = public_config_raw(config.raw)
    for setting in ("solver", "runner", "measure_on"):
        placement.get("postprocess", {}).pop(setting, None)
    geography = config.input.geography
    return (f"{config_hash(json.dumps(placement, sort_keys=True, default=str).encode())}:"
            f"{config_hash(geography.read_bytes()) if geography else '-'}:{mf.code_version()}")
