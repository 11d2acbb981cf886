"""Configurations edited as data, not as text: a TOML file read, its dotted keys set (``apply_overrides``, the
CLI's own way of overriding a configuration), written back."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from censusdp.pipeline.config.load import apply_overrides


def edit_config(path: Path, overrides: dict[str, Any], out: Path | None = None) -> Path:
    """Set each dotted key of the TOML at ``path`` (None removes it); write to ``out`` (default: in place)."""
    raw = tomllib.loads(Path(path).read_text())
    apply_overrides(raw, overrides)
    target = Path(out) if out is not None else Path(path)
    target.write_text(tomli_w.dumps(raw))
    return target


def preset_config(out: Path, preset: str, overrides: dict[str, Any] | None = None, *, files: Any = None) -> Path:
    """A preset's configuration written to ``out`` with ``overrides`` set; ``files`` (``synth``'s
    ``SyntheticFiles``, or a folder holding microdata, geography and units) become its input paths."""
    from censusdp.pipeline.cli.commands import preset_text

    out.write_text(preset_text(preset))
    paths: dict[str, Any] = {}
    if files is not None:
        named = {name: (getattr(files, name) if not isinstance(files, Path) else files / f"{name}.parquet")
                 for name in ("microdata", "geography", "units")}
        paths = {"input.path": str(named["microdata"]), "input.geography": str(named["geography"]),
                 "units.path": str(named["units"])}
    return edit_config(out, {**paths, **(overrides or {})})
