"""Errors users see: one line (the CLI prints it and exits non-zero), naming the file and column/row or the config
key, never a confidential value: error text ends up in logs and in Prefect's database.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from enum import StrEnum
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class CensusDPError(Exception):
    """Base class of every error meant for the user."""


class ConfigError(CensusDPError):
    """The configuration (TOML) is invalid; the message names the key."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        super().__init__(f"{source}: {key}: {problem}")
        self.source, self.key, self.problem = source, key, problem


class ExactNumberError(CensusDPError, ValueError):
    """A value that must be an exact number (a budget, a noise scale, a delta) is not one; names the parameter.
    Also a ``ValueError``: the privacy layer's argument checks raise ``ValueError`` and callers catch that."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"{name}: {problem}")
        self.name, self.problem = name, problem


class InputProblem(StrEnum):
    """What kind of input problem an ``InputError`` is.  FILE and COLUMN depend on the files' structure only;
    the others on confidential values, so a release meets them only after its charge."""

    FILE = "file"                    # missing, unreadable
    COLUMN = "column"                # a required column missing, of the wrong type, or duplicated
    EMPTY = "empty"                  # no person (or unit) records
    MISSING_VALUE = "missing-value"  # a null or empty value
    GEOCODE = "geocode"              # a geocode of the wrong width or form
    DOMAIN = "domain"                # a value outside an attribute's domain
    GEOGRAPHY = "geography"          # a unit not in the geography file, or a malformed geography file
    DUPLICATE = "duplicate"          # a unit listed twice in the geography file
    LAYOUT = "layout"                # a record that breaks its layout's rules (an MDF unit's RTYPE against GQTYPE)
    PERSONS_UNITS = "persons-units"  # a block's persons and units break a [[units.persons_per_unit]] rule

    @property
    def depends_on_values(self) -> bool:
        return self not in (InputProblem.FILE, InputProblem.COLUMN)


class InputError(CensusDPError):
    """The microdata or geography file is invalid; the message names file, column and row (1-based).  Shown by
    ``censusdp check`` and file-level checks; a release past its charge reports an ``InputRejectedError``."""

    def __init__(self, path: str, problem: str, *, column: str | None = None, row: int | None = None,
                 category: InputProblem = InputProblem.FILE) -> None:
        where = [str(path)]
        if column is not None:
            where.append(f"column {column}")
        if row is not None:
            where.append(f"row {row}")
        super().__init__(f"{', '.join(where)}: {problem}")
        self.path, self.column, self.row, self.problem = str(path), column, row, problem
        self.category = category


class InputRejectedError(CensusDPError):
    """A release's input failed a value-level check after the budget was charged.  Names the category only (no
    row, column or value): it reaches the logs of people who may start releases but not read the data."""

    def __init__(self, category: InputProblem, check_command: str) -> None:
        super().__init__(
            f"the input failed validation after the budget was charged ({category.value} problem); the charge "
            f"stands and nothing was published; a data curator can see where with: {check_command}")
        self.category = category


class InternalError(CensusDPError):
    """An unexpected exception, reported by its type only: its text could quote a confidential value."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"internal error ({kind}); nothing was published")


def type_only_errors(stage: Callable[P, R], public: tuple[type[BaseException], ...] = ()) -> Callable[P, R]:
    """``stage`` with every unexpected exception (a numpy or polars error may quote a value) replaced by an
    ``InternalError`` naming its type only; ``CensusDPError`` and the ``public`` types carry public text and pass."""

    @functools.wraps(stage)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        kind = None
        try:
            return stage(*args, **kwargs)
        except (CensusDPError, KeyboardInterrupt, SystemExit, GeneratorExit, *public):
            raise
        except BaseException as error:  # noqa: BLE001 - replaced, not swallowed (a polars panic is a BaseException)
            kind = type(error).__name__
        raise InternalError(kind)  # outside the handler: the original is not chained to it

    return guarded
