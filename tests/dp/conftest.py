"""Fixtures of the privacy layer's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from censusdp.pipeline.dp import gaussian_table as nt


@pytest.fixture
def fresh_caches() -> Iterator[None]:
    nt.clear_caches()
    yield
    nt.clear_caches()
