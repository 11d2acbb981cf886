"""A user's project folder with packages of its own named like censusdp's stage folders (``flows``, ``pipeline``,
``postprocess``, ``geography``), each failing loudly when imported: censusdp run from there must not import them."""

from __future__ import annotations

from pathlib import Path

DECOY_NAMES = ("flows", "pipeline", "postprocess", "geography")


def decoy_project(folder: Path) -> Path:
    for name in DECOY_NAMES:
        package = folder / name
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(f'raise ImportError("the user\'s own {name} package was imported")\n')
        (package / "release.py").write_text("")
    return folder
