"""The ``tabulate`` stage: the configured summary tables (``[output] tables``) from the reconciled cells."""

from __future__ import annotations

import logging

from censusdp.pipeline.io.summary_tables import write_summary_tables
from censusdp.pipeline.release.expected_errors import expected_errors
from censusdp.pipeline.release.run import Release, stage_output
from censusdp.pipeline.release.universes import check_same_blocks

log = logging.getLogger("censusdp")


def tabulate(run: Release) -> None:
    """Write ``tables/<set>/<level>.parquet`` and the set's dictionary for every configured set, from the published
    integer tables just reconciled (post-processing, Thm 19.25); the lowest level's were written by its
    reconciliation tasks (``release.lowest_parts``)."""
    persons = run.persons
    tree = stage_output(persons.tree, "the geography (validate_inputs, or a re-run's measurements)")
    names = [lv.name for lv in run.config.levels]
    counts = [persons.counts.get(level) for level in range(len(names))]  # the lowest's: written as it was reconciled
    units = None
    if run.units is not None:  # the same tree: the units universe's housing tables (H1) join the same files
        check_same_blocks(run)
        units = (run.units.schema, [run.units.counts.get(level) for level in range(len(names))])
    for tables in run.config.output.tables:
        run.summary_tables[tables.value] = write_summary_tables(run.work_dir / "tables", tables, persons.schema,
                                                                names, tree.geoids, counts, units)
        log.info("summary tables %s written for %d levels", tables.value, len(names))
    if run.expected_errors is None:  # not computed beside the lowest level's tasks (reconcile)
        run.expected_errors = expected_errors(persons)
