"""What the release writes from the lowest level's published counts, chunk by chunk as they are reconciled.

The lowest level (the blocks) is most of a release's nodes: holding every block's counts until ``tabulate`` and
``publish`` would make the driver's memory grow with the input.  So, for the main universe, each reconciled chunk
goes at once into the protected microdata, each summary table set's lowest level (its housing columns from the
units universe's counts of the same blocks, reconciled before, and kept: a few cells per block) and the count of
blocks where persons and units disagree; then it is dropped.  Post-processing of published counts only
(Thm 19.25).  ``run.counts`` keeps the levels above, which the next level's tasks and ``tabulate`` read.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import scipy.sparse as sp

from pipeline.io.summary_tables import SummaryTableWriter, summary_path, table_columns
from pipeline.io.tables import ProtectedMicrodataWriter
from pipeline.release.run import ReleaseRun, stage_output
from pipeline.release.universes import check_same_blocks, disagreements, disagreements_apply


class LowestOutputs:
    """The writers fed by the lowest level's chunks (``write_chunk``), in node order; ``close`` finishes them."""

    def __init__(self, run: ReleaseRun) -> None:
        self.run = run
        config = run.config
        self.lowest = len(config.levels) - 1
        self.units = run.units
        check_same_blocks(run)  # its blocks' counts are paired with these by position
        units_schema = self.units.schema if self.units is not None else None
        self.microdata = (ProtectedMicrodataWriter(run.work_dir / "microdata.parquet", run.schema,
                                                   config.output.geocode_parts)
                          if config.output.protected_microdata else None)
        self.tables = []
        for tables in config.output.tables:
            columns = table_columns(tables, run.schema, units_schema)
            path = summary_path(run.work_dir / "tables", tables, config.levels[-1].name)
            self.tables.append(SummaryTableWriter(path, columns))
        self.compare = self.units is not None and disagreements_apply(run.schema, self.units.schema)
        self.disagreements: Counter[str] = Counter()

    def _units_counts(self, start: int, stop: int) -> sp.csr_matrix:
        units = stage_output(self.units, "the units universe")
        return units.counts[self.lowest][start:stop]

    def write_chunk(self, start: int, stop: int, counts: sp.csr_matrix) -> None:
        tree = stage_output(self.run.tree, "the geography")
        geoids = tree.geoids[self.lowest][start:stop]
        if self.microdata is not None:
            self.microdata.write_chunk(geoids, counts)
        units_counts = self._units_counts(start, stop) if self.units is not None else None
        for writer in self.tables:
            parts = [counts, *([units_counts] if len(writer.columns) > 1 else [])]
            writer.write_rows(np.asarray(geoids), parts)
        if self.compare and units_counts is not None:
            self.disagreements.update(disagreements(self.run.schema, self.units.schema, counts, units_counts))

    def close(self) -> None:
        """Finish every file; the disagreements go to ``run.disagreements`` (every category, zeros included)."""
        if self.microdata is not None:
            self.microdata.close()
        for writer in self.tables:
            writer.close()
        if self.compare:
            self.run.disagreements = dict(self.disagreements)
