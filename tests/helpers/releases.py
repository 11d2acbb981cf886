"""Release helpers shared by the tests: the CLI in process, a seeded release, its published run folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.cli import main


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["-q", *argv])
    captured = capsys.readouterr()
    return code, captured.out.strip(), captured.err


def release(capsys: pytest.CaptureFixture[str], config: Path, *extra: str, seed: int = 5) -> tuple[int, str, str]:
    return cli(capsys, "release", str(config), "--no-prefect", "--insecure-seed", str(seed), *extra)


def release_dir(capsys: pytest.CaptureFixture[str], config: Path, *extra: str, seed: int = 5) -> Path:
    """A seeded release that must succeed; returns the published run folder (the last line printed)."""
    code, out, err = release(capsys, config, *extra, seed=seed)
    assert code == 0, err
    return Path(out.splitlines()[-1])
