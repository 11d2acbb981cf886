"""The P.L. 94-171 summary tables P1-P5 and H1 as sets of detailed cells (``[output] tables``, docs/tables.md).

The published tables are sums of the reconciled integer cells, so they are integer, non-negative and consistent
with each other and with the detailed tables by construction.  Names and labels are the 2020 redistricting data's.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from censusdp.pipeline.config.model import SummaryTables
from censusdp.pipeline.config.schema import Schema
from censusdp.pipeline.errors import ConfigError

RACES = ("White", "Black or African American", "American Indian and Alaska Native", "Asian",
         "Native Hawaiian and Other Pacific Islander", "Some Other Race")
RACE_SETS = tuple(c for size in range(1, len(RACES) + 1) for c in itertools.combinations(range(len(RACES)), size))
COUNT_WORDS = ("", "one", "two", "three", "four", "five", "six")

RACE, HISPANIC, VOTING_AGE, GQ_TYPE = "cenrace", "hispanic", "votingage", "hhgq"
# the detailed schema these definitions read: attribute -> its values, as in the pl94 presets (Census codes)
REQUIRED = {
    RACE: tuple(f"{code:02d}" for code in range(1, len(RACE_SETS) + 1)),
    HISPANIC: ("1", "2"),  # CENHISP: 1 not Hispanic or Latino, 2 Hispanic or Latino
    VOTING_AGE: ("1", "2"),  # VOTING_AGE: 1 under 18, 2 18 years and over
    GQ_TYPE: tuple(str(t) for t in range(8)),  # GQTYPE_PL: 0 household, 1-4 institutional, 5-7 not
}
OCCUPANCY = "occupancy"
# the units schema H1 reads: hhgq as the persons' (0 a housing unit, 1-7 a group-quarters facility of that type) and
# occupancy with the P.L. 94-171 MDF unit file's HH_STATUS codes
UNITS_REQUIRED = {GQ_TYPE: REQUIRED[GQ_TYPE], OCCUPANCY: ("1", "2")}  # 1 occupied, 2 vacant
HOUSING_UNIT, OCCUPIED, VACANT = "0", "1", "2"
GQ_TYPES = (("Institutionalized population", (("1", "Correctional facilities for adults"),
                                              ("2", "Juvenile facilities"),
                                              ("3", "Nursing facilities/Skilled-nursing facilities"),
                                              ("4", "Other institutional facilities"))),
            ("Noninstitutionalized population", (("5", "College/University student housing"),
                                                 ("6", "Military quarters"),
                                                 ("7", "Other noninstitutional facilities"))))


Cells = tuple[tuple[str, tuple[str, ...]], ...]  # (attribute, the values selected); the others summed


@dataclass(frozen=True)
class Variable:
    """One published count: ``cells`` restricts some attributes to some of their values (the rest are summed)."""

    table: str
    name: str
    label: str
    universe: str
    cells: Cells


def _race_rows() -> list[tuple[str, tuple[str, ...]]]:
    """P1's 71 rows below the universe: (label path, CENRACE codes)."""
    codes = REQUIRED[RACE]

    def of_size(size: int) -> tuple[str, ...]:
        return tuple(code for code, races in zip(codes, RACE_SETS, strict=True) if len(races) == size)

    rows = [("Total:", codes), ("Total:!!Population of one race:", of_size(1))]
    rows += [(f"Total:!!Population of one race:!!{RACES[races[0]]} alone", (code,))
             for code, races in zip(codes, RACE_SETS, strict=True) if len(races) == 1]
    several = "Total:!!Population of two or more races:"
    rows.append((several, tuple(c for c, races in zip(codes, RACE_SETS, strict=True) if len(races) > 1)))
    for size in range(2, len(RACES) + 1):
        group = f"{several}!!Population of {COUNT_WORDS[size]} races:"
        rows.append((group, of_size(size)))
        rows += [(f"{group}!!{'; '.join(RACES[r] for r in races)}", (code,))
                 for code, races in zip(codes, RACE_SETS, strict=True) if len(races) == size]
    return rows


def _numbered(table: str, universe: str, rows: list[tuple[str, Cells]]) -> list[Variable]:
    """The rows (label, cells) as the table's variables, numbered from 001."""
    return [Variable(table, f"{table}_{i:03d}N", label, universe, cells)
            for i, (label, cells) in enumerate(rows, start=1)]


def _race_table(table: str, universe: str, fixed: Cells) -> list[Variable]:
    return _numbered(table, universe, [(f"!!{label}", (*fixed, (RACE, codes))) for label, codes in _race_rows()])


def _hispanic_table(table: str, universe: str, fixed: Cells) -> list[Variable]:
    not_hispanic = (*fixed, (HISPANIC, ("1",)))
    rows = [("!!Total:", fixed), ("!!Total:!!Hispanic or Latino", (*fixed, (HISPANIC, ("2",)))),
            ("!!Total:!!Not Hispanic or Latino:", not_hispanic)]
    rows += [(f"!!Total:!!Not Hispanic or Latino:!!{label.removeprefix('Total:!!')}", (*not_hispanic, (RACE, codes)))
             for label, codes in _race_rows()[1:]]
    return _numbered(table, universe, rows)


def _group_quarters_table() -> list[Variable]:
    rows = [("!!Total:", tuple(value for _, types in GQ_TYPES for value, _ in types))]
    for kind, types in GQ_TYPES:
        rows.append((f"!!Total:!!{kind}:", tuple(value for value, _ in types)))
        rows += [(f"!!Total:!!{kind}:!!{label}", (value,)) for value, label in types]
    return _numbered("P5", "Population in group quarters", [(label, ((GQ_TYPE, values),)) for label, values in rows])


def pl94_variables() -> tuple[Variable, ...]:
    """P1 (71), P2 (73), P3 (71), P4 (73) and P5 (10): 298 variables, in publication order."""
    adults = ((VOTING_AGE, ("2",)),)
    return (*_race_table("P1", "Total population", ()),
            *_hispanic_table("P2", "Total population", ()),
            *_race_table("P3", "Total population 18 years and over", adults),
            *_hispanic_table("P4", "Total population 18 years and over", adults),
            *_group_quarters_table())


def h1_variables() -> tuple[Variable, ...]:
    """H1 (occupancy status) over the units schema: housing units (hhgq 0; group-quarters facilities are not
    housing units), occupied and vacant."""
    housing = ((GQ_TYPE, (HOUSING_UNIT,)),)
    return tuple(_numbered("H1", "Housing units", [("!!Total:", housing),
                                                   ("!!Total:!!Occupied", (*housing, (OCCUPANCY, (OCCUPIED,)))),
                                                   ("!!Total:!!Vacant", (*housing, (OCCUPANCY, (VACANT,))))]))


def _schema_problem(schema: Schema, required: dict[str, tuple[str, ...]], tables_need: str) -> str | None:
    for name, values in required.items():
        if name not in schema.names:
            return f"{tables_need} the attribute {name!r}"
        if schema.attribute(name).values != values:
            return f"{tables_need} {name!r} with the values {', '.join(values)}"
    return None


def pl94_schema_problem(schema: Schema) -> str | None:
    """Why these definitions cannot be read from ``schema`` (None when they can)."""
    return _schema_problem(schema, REQUIRED, "the P.L. 94-171 tables need")


def h1_schema_problem(schema: Schema) -> str | None:
    """Why H1 cannot be read from the units universe's ``schema`` (None when it can)."""
    return _schema_problem(schema, UNITS_REQUIRED, "the P.L. 94-171 table H1 needs")


def summary_tables(value: Any, schema: Schema, source: str) -> tuple[SummaryTables, ...]:
    """``[output] tables``: the summary tables to publish, each checked against the schema it is read from."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or len(set(value)) != len(value):
        raise ConfigError(source, "output.tables", "expected a list of distinct table set names")
    out = []
    for name in value:
        try:
            out.append(SummaryTables(name))
        except ValueError:
            known = ", ".join(repr(t.value) for t in SummaryTables)
            raise ConfigError(source, "output.tables", f"{name!r} is not a table set (known: {known})") from None
    if SummaryTables.PL94 in out and (problem := pl94_schema_problem(schema)) is not None:
        raise ConfigError(source, "output.tables", problem)
    return tuple(out)
