"""The release configuration's data classes, and the helpers that read its keys (every error names the key).
Budgets are exact ``Fraction``s; levels, the strategy and the shares are keyed by level *name*, never by position.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from pathlib import Path
from typing import Any

from censusdp.geography.levels import Level
from censusdp.pipeline.config.ledger_location import redact_url
from censusdp.pipeline.config.schema import TOTAL, Query, Schema
from censusdp.pipeline.errors import ConfigError, ExactNumberError
from censusdp.pipeline.exact import parse_rational


class Format(StrEnum):
    """Microdata file formats."""

    PARQUET = "parquet"
    CSV = "csv"
    MDF_PL94 = "mdf-pl94"  # the Census Bureau's PPMF / MDF person file (P.L. 94-171 attributes)
    MDF_UNITS = "mdf-units"  # the Census Bureau's 2020 MDF unit file (RTYPE, GQTYPE, VACS or HH_STATUS)

    @property
    def is_mdf(self) -> bool:
        """An MDF layout: the geocode is built from the TAB* columns, and the separator may be a pipe."""
        return self in (Format.MDF_PL94, Format.MDF_UNITS)


class Universe(StrEnum):
    """What one record of a universe's microdata is: a release has a persons universe and may have a units one
    (``[units]``, docs/units.md).  Each universe has its own schema, strategy, budget and file formats."""

    PERSONS = "persons"
    UNITS = "units"

    @property
    def formats(self) -> tuple[Format, ...]:
        """The file formats its microdata may come in: the MDF person layout holds no units, and back."""
        mdf = Format.MDF_PL94 if self is Universe.PERSONS else Format.MDF_UNITS
        return (Format.PARQUET, Format.CSV, mdf)

    @property
    def record(self) -> str:
        """What one row is, for messages ("contains no person records")."""
        return "person" if self is Universe.PERSONS else "unit"


class Neighbouring(StrEnum):
    """The neighbouring relation the guarantee is stated for (the unit of privacy: one person)."""

    ADD_REMOVE = "add-remove"
    REPLACE_ONE = "replace-one"

    @property
    def sensitivity2_squared(self) -> int:
        """Squared L2 sensitivity of one histogram query (§19.1, Ex. 19.12): add-remove changes one cell by 1 (1);
        replace-one one cell by -1 and another by +1 (2, for every query as the Census did: conservative for
        marginals)."""
        return 1 if self is Neighbouring.ADD_REMOVE else 2

    @property
    def sensitivity1(self) -> int:
        """L1 sensitivity of one histogram query: 1 under add-remove, 2 under replace-one (Ex. 19.12)."""
        return 1 if self is Neighbouring.ADD_REMOVE else 2


class Mechanism(StrEnum):
    """The noise a query's measurements get."""

    GAUSSIAN = "gaussian"  # exact discrete Gaussian: rho-zCDP
    LAPLACE = "laplace"  # exact discrete Laplace: pure epsilon-DP, accounted as epsilon^2/2-zCDP


DEFAULT_TOLERANCE = Fraction(1, 10)  # production's opt_tol_slack
DEFAULT_ROUNDING = (TOTAL,)  # marginals rounded before the cells at every level (pipeline.config.reconciliation)
DEFAULT_CHUNK_CELLS = 4_000_000  # cells per chunk of a level: ~32 MB of int64 per query array


class ReconciliationMethod(StrEnum):
    """What each level's least squares fits (docs/reconciliation.md)."""

    FULL_INFORMATION = "full_information"  # the tree's GLS estimates of every query, inverse-variance weighted
    LEVEL_BY_LEVEL = "level_by_level"  # the level's own noisy measurements (and its only-child chain)


@dataclass(frozen=True)
class LevelPasses:
    """One level's order: least-squares passes (query names), marginals rounded first, and the tolerance."""

    l2: tuple[tuple[str, ...], ...] = ()
    rounding: tuple[Query, ...] = ()
    tolerance: Fraction = DEFAULT_TOLERANCE


@dataclass(frozen=True)
class Reconciliation:
    method: ReconciliationMethod
    passes: dict[str, LevelPasses]  # every level's, defaults filled in


class SummaryTables(StrEnum):
    """Standard summary tables published beside the detailed ones (``[output] tables``)."""

    PL94 = "pl94"  # P.L. 94-171 P1-P5 (pipeline.config.pl94_tables)


class Accountant(StrEnum):
    """Which (epsilon, delta) accountant turns a ``budget.epsilon`` target into rho (``budget.accountant``): the
    certified privacy curve of the composed noise (the default, tighter) or CKS20 Corollary 13 (rho only)."""

    PLD = "pld"
    CKS20 = "cks20"


def geography_column(table: dict[str, Any]) -> str:
    """The geography file's code column of an ``[input]`` table: its own key, else the records' code column where the
    records hold one (not a layout that builds it, nor several joined columns), else ``geocode``."""
    if "geography_column" in table:
        return str(table["geography_column"])
    built = Format(table.get("format", "parquet")).is_mdf or table.get("geocode_columns")
    return "geocode" if built else str(table.get("geocode_column", "geocode"))


@dataclass(frozen=True)
class InputConfig:
    path: Path | None
    format: Format
    geocode_column: str = "geocode"
    geocode_columns: tuple[str, ...] = ()
    geography: Path | None = None
    geography_column: str = "geocode"  # the geography file's code column

    def __post_init__(self) -> None:  # the word as written becomes the enum member (ValueError if unknown)
        object.__setattr__(self, "format", Format(self.format))


@dataclass(frozen=True)
class BudgetConfig:
    rho: Fraction
    delta: float
    delta_text: str
    neighbouring: Neighbouring
    level_shares: dict[str, Fraction]
    target_epsilon: float | None = None
    accountant: Accountant | None = None  # the accountant that set rho from target_epsilon (None: rho was given)

    def __post_init__(self) -> None:
        object.__setattr__(self, "neighbouring", Neighbouring(self.neighbouring))
        if self.accountant is not None:
            object.__setattr__(self, "accountant", Accountant(self.accountant))

    @property
    def sensitivity2_squared(self) -> int:
        return self.neighbouring.sensitivity2_squared

    @property
    def sensitivity1(self) -> int:
        return self.neighbouring.sensitivity1


@dataclass(frozen=True)
class StrategyQuery:
    query: Query
    share: Fraction
    mechanism: Mechanism = Mechanism.GAUSSIAN

    def __post_init__(self) -> None:
        object.__setattr__(self, "mechanism", Mechanism(self.mechanism))


@dataclass(frozen=True)
class Invariant:
    query: Query
    levels: tuple[str, ...]


@dataclass(frozen=True)
class OutputConfig:
    dir: Path
    protected_microdata: bool = False
    estimates: bool = False
    geocode_parts: tuple[tuple[str, int], ...] = ()
    tables: tuple[SummaryTables, ...] = ()  # summary tables written under tables/<name>/


@dataclass(frozen=True)
class LedgerConfig:
    """Where budget is charged: a dataset id with a lifetime cap, in a ledger file (or PostgreSQL URL)."""

    location: str  # may hold a password (a postgresql:// URL): never written, logged or shown (see __repr__)
    dataset: str
    cap_rho: Fraction

    def __repr__(self) -> str:
        return f"LedgerConfig(location={redact_url(self.location)!r}, dataset={self.dataset!r})"


class MeasureOn(StrEnum):
    """Where a run with a Dask runner reads its records and draws its noise (``postprocess.measure_on``)."""

    AUTO = "auto"  # as WORKERS; a local cluster's driver also takes tasks while its workers start (one machine)
    WORKERS = "workers"  # the group tasks run on the workers (they read confidential records: docs/dask.md)
    DRIVER = "driver"  # in the driver's process; the workers only reconcile


@dataclass(frozen=True)
class ReleaseConfig:
    source: str
    input: InputConfig
    ledger: LedgerConfig
    output: OutputConfig
    levels: tuple[Level, ...]
    schema: Schema
    budget: BudgetConfig
    strategy: dict[str, tuple[StrategyQuery, ...]]
    invariants: tuple[Invariant, ...] = ()
    structural_zeros: tuple[dict[str, tuple[str, ...]], ...] = ()
    solver: str = "auto"
    runner: str = "auto"  # pipeline.release.runner: the machine's cores where the release has work for them
    measure_on: MeasureOn = MeasureOn.AUTO
    chunk_cells: int = DEFAULT_CHUNK_CELLS
    reconciliation: Reconciliation | None = None  # pipeline.config.reconciliation; set by the loader
    raw: dict[str, Any] = field(default_factory=dict, compare=False)  # as read: may hold a ledger password
    universe: Universe = Universe.PERSONS
    # the housing-unit universe ([units], pipeline.config.units), None when the release has persons only
    units: ReleaseConfig | None = None
    # persons and units tied together ([[units.persons_per_unit]], pipeline.config.persons_per_unit)
    persons_per_unit: tuple[Any, ...] = ()

    def __repr__(self) -> str:  # the raw table and the ledger URL may hold secrets
        return f"ReleaseConfig(source={self.source!r})"

    @property
    def reconciliation_method(self) -> ReconciliationMethod:
        return self.reconciliation.method if self.reconciliation else ReconciliationMethod.FULL_INFORMATION

    def level_passes(self, level: str) -> LevelPasses:
        """The level's least-squares passes and rounding order (``pipeline.config.reconciliation``)."""
        if self.reconciliation is None:
            return LevelPasses(rounding=tuple(self.schema.parse_query(n) for n in DEFAULT_ROUNDING))
        return self.reconciliation.passes[level]


def parse_fraction(value: Any, source: str, key: str) -> Fraction:
    """An exact rational from a string ("2.56", "104/4099"), an int, or a TOML float read as written
    (``pipeline.exact.parse_rational``), as a ``ConfigError`` naming the key."""
    with config_error_at(source, key):
        return parse_rational(value, key, floats_as_written=True)


@contextmanager
def config_error_at(source: str, key: str) -> Iterator[None]:
    """A ``ValueError`` raised in the block becomes a ``ConfigError`` at ``key``, with its message (an
    ``ExactNumberError``'s problem: the key names the number)."""
    try:
        yield
    except ValueError as error:
        raise ConfigError(source, key, error.problem if isinstance(error, ExactNumberError) else str(error)) from None


def check_nothing_else(table: dict[str, Any], allowed: set[str], source: str, prefix: str) -> None:
    """Unknown keys are errors: a typo must not silently fall back to a default."""
    for key in table:
        if key not in allowed:
            raise ConfigError(source, f"{prefix}{key}", f"unknown key (allowed: {', '.join(sorted(allowed))})")


def tables_of(entries: Any, key: str, source: str, allowed: set[str] | None = None,
              problem: str = "expected a table") -> Iterator[tuple[str, dict[str, Any]]]:
    """Each table of the array ``[[key]]`` and its key (``levels[0]``), checked to be a table (of ``allowed`` keys)."""
    if not isinstance(entries, list):
        raise ConfigError(source, key, f"expected an array of tables ([[{key}]])")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ConfigError(source, f"{key}[{i}]", problem)
        if allowed is not None:
            check_nothing_else(entry, allowed, source, f"{key}[{i}].")
        yield f"{key}[{i}]", entry


_KIND_NAMES = {str: "a string", int: "an integer", list: "a list", dict: "a table", bool: "true/false"}


def require(table: dict[str, Any], key: str, kind: type, source: str, prefix: str) -> Any:
    if key not in table:
        raise ConfigError(source, f"{prefix}{key}", "missing")
    value = table[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ConfigError(source, f"{prefix}{key}",
                          f"expected {_KIND_NAMES.get(kind, kind.__name__)}, got {type(value).__name__}")
    return value


RUNNER_HELP = ('one of "auto" (the default: a local Dask cluster of one worker per core of this machine, when the '
               'release has work for more than one), "local" (one process), "dask-local:N" (N worker processes), or a '
               'Dask scheduler address "tcp://host:port" (or "tls://host:port", with the TLS files in Dask\'s '
               'configuration: distributed.comm.tls)')


def check_runner(spec: str) -> str:
    """Validate a runner spec; raise ValueError naming the problem."""
    if spec in ("auto", "local") or spec.startswith(("tcp://", "tls://")):
        return spec
    if spec.startswith("dask-local:"):
        workers = spec.split(":", 1)[1]
        if workers.isdigit() and int(workers) >= 1:
            return spec
    raise ValueError(f"unknown runner {spec!r}: {RUNNER_HELP}")
