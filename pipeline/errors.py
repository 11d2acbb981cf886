"""Errors users see: one line, naming the file and column/row or the config key, never a confidential value.

Every error that reaches the CLI is a ``CensusDPError``: the CLI prints ``str(error)`` on one line and exits
non-zero.  Messages name *where* the problem is (file, column, row number, key); they never quote the
offending microdata value, because error text ends up in logs and in Prefect's database.
"""

from __future__ import annotations


class CensusDPError(Exception):
    """Base class of every error meant for the user."""


class ConfigError(CensusDPError):
    """The configuration (TOML) is invalid; the message names the key."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        super().__init__(f"{source}: {key}: {problem}")
        self.source, self.key, self.problem = source, key, problem


class InputError(CensusDPError):
    """The microdata or geography file is invalid; the message names file, column and row (1-based)."""

    def __init__(self, path: str, problem: str, *, column: str | None = None, row: int | None = None) -> None:
        where = [str(path)]
        if column is not None:
            where.append(f"column {column}")
        if row is not None:
            where.append(f"row {row}")
        super().__init__(f"{', '.join(where)}: {problem}")
        self.path, self.column, self.row, self.problem = str(path), column, row, problem
