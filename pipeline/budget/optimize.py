"""``censusdp budget optimize CONFIG --weights ...``: level and query shares that minimise a weighted error.

Weighted variance Σ w·Δ₂²/(2ρ_{l,q}) under Σ ρ_{l,q} = ρ is least at ρ_{l,q} ∝ √w_{l,q} (Thm 19.37(iii),
Cauchy–Schwarz): ρ, hence the guarantee, is unchanged.  Zero-weight floors and exact rounding: docs/commands.md.
"""

from __future__ import annotations

import re
import tomllib
from fractions import Fraction
from math import sqrt
from pathlib import Path
from typing import Any

import tomli_w

from censusdp.pipeline.config.load import load_config, parse_config
from censusdp.pipeline.config.model import ReleaseConfig
from censusdp.pipeline.errors import CensusDPError

FLOOR_RATIO = 0.01
LEVEL_DENOMINATOR = 1000
QUERY_DENOMINATOR = 1000

Key = tuple[str, str]  # (level name, query name)


def parse_weights(spec: str | dict[str, Any], config: ReleaseConfig) -> dict[Key, float]:
    """Weights from ``"county:total=10,tract:detailed=1"`` (``*`` for any level or query), a TOML file of
    ``[weights.<level>] query = w`` tables, or such a dict.  Unknown levels or unmeasured queries are errors."""
    if isinstance(spec, str) and Path(spec).is_file():
        table = tomllib.loads(Path(spec).read_text())
        spec = table.get("weights", table)
    entries: list[tuple[str, str, Any]] = []
    if isinstance(spec, dict):
        for level, queries in spec.items():
            if not isinstance(queries, dict):
                raise CensusDPError(f"weights.{level}: expected a table of query = weight")
            entries += [(level, query, value) for query, value in queries.items()]
    else:
        for item in filter(None, (part.strip() for part in spec.split(","))):
            match = re.fullmatch(r"([^:=]+):([^=]+)=(.+)", item)
            if not match:
                raise CensusDPError(f"--weights: {item!r} is not LEVEL:QUERY=WEIGHT")
            entries.append((match[1].strip(), match[2].strip(), match[3].strip()))
    measured = [(lv.name, e.query.name) for lv in config.levels for e in config.strategy[lv.name]]
    weights = dict.fromkeys(measured, 0.0)
    for level, query, value in entries:
        try:
            weight = float(value)
        except (TypeError, ValueError):
            raise CensusDPError(f"weight of {level}:{query}: expected a number, got {value!r}") from None
        if not weight >= 0 or weight == float("inf"):
            raise CensusDPError(f"weight of {level}:{query}: must be a finite number >= 0")
        try:
            name = query if query == "*" else config.schema.parse_query(query).name
        except ValueError as error:
            raise CensusDPError(f"weights: {error}") from None
        hits = [k for k in measured if level in ("*", k[0]) and name in ("*", k[1])]
        if not hits:
            raise CensusDPError(f"weights: {level}:{query} is not a level x query measured by the configuration")
        for key in hits:
            weights[key] = weight
    if not any(w > 0 for w in weights.values()):
        raise CensusDPError("weights: give at least one positive weight")
    return weights


def optimal_shares(weights: dict[Key, float]) -> dict[Key, float]:
    """The continuous optimum: share of ρ ∝ √w, zero weights at the documented floor."""
    roots = {k: sqrt(w) for k, w in weights.items()}
    floor = FLOOR_RATIO * min(r for r in roots.values() if r > 0)
    roots = {k: r if r > 0 else floor for k, r in roots.items()}
    total = sum(roots.values())
    return {k: r / total for k, r in roots.items()}


def round_shares(values: dict[str, float], denominator: int) -> dict[str, Fraction]:
    """Exact shares summing to 1, each > 0: the nearest fractions with denominators <= ``denominator`` when they
    sum to exactly 1, else largest-remainder rounding to multiples of 1/denominator (each at least one unit)."""
    if len(values) > denominator:
        raise CensusDPError(f"more than {denominator} shares to round")
    total = sum(values.values())
    simple = {k: Fraction(v / total).limit_denominator(denominator) for k, v in values.items()}
    if sum(simple.values()) == 1 and all(v > 0 for v in simple.values()):
        return simple  # e.g. 1/3 each: the nearest fractions with small denominators already sum to 1
    scaled = {k: v / total * denominator for k, v in values.items()}
    units = {k: max(1, int(s)) for k, s in scaled.items()}
    while sum(units.values()) > denominator:  # floors pushed the sum over: take from the largest
        biggest = max((k for k in units if units[k] > 1), key=lambda k: (units[k] - scaled[k], units[k]))
        units[biggest] -= 1
    order = sorted(scaled, key=lambda k: scaled[k] - units[k], reverse=True)
    for k in order[: denominator - sum(units.values())]:
        units[k] += 1
    return {k: Fraction(u, denominator) for k, u in units.items()}


def expected_variance(config: ReleaseConfig, weights: dict[Key, float],
                      level_shares: dict[str, Fraction], query_shares: dict[Key, Fraction]) -> float:
    """Σ w·σ², σ² = Δ₂²/(2ρ_{l,q}) with ρ_{l,q} = ρ · level share · query share."""
    d2, rho = config.budget.sensitivity2_squared, config.budget.rho
    return sum(w * d2 / (2 * float(rho * level_shares[k[0]] * query_shares[k])) for k, w in weights.items())


def optimize_budget(config_path: str | Path, weights: str | dict[str, Any], out_path: str | Path | None) -> dict:
    """Optimise a configuration's shares for ``weights``; write the new configuration to ``out_path`` (if given).
    Returns the shares (exact fractions as strings), the weighted expected variance ``before``, ``after`` (rounded
    shares, floors included) and ``optimum`` (Δ₂²(Σ√w)²/(2ρ), without floors or rounding), and ``path``."""
    config = load_config(config_path)
    parsed = parse_weights(weights, config)
    continuous = optimal_shares(parsed)
    levels = [lv.name for lv in config.levels]
    level_shares = round_shares({lv: sum(s for k, s in continuous.items() if k[0] == lv) for lv in levels},
                                LEVEL_DENOMINATOR)
    query_shares: dict[Key, Fraction] = {}
    for lv in levels:
        rounded = round_shares({k[1]: s for k, s in continuous.items() if k[0] == lv}, QUERY_DENOMINATOR)
        query_shares.update({(lv, q): share for q, share in rounded.items()})
    old_queries = {(lv, e.query.name): e.share for lv in levels for e in config.strategy[lv]}
    rho, d2 = float(config.budget.rho), config.budget.sensitivity2_squared
    result: dict[str, Any] = {
        "level_shares": {lv: str(s) for lv, s in level_shares.items()},
        "query_shares": {f"{lv}:{q}": str(s) for (lv, q), s in query_shares.items()},
        "before": expected_variance(config, parsed, config.budget.level_shares, old_queries),
        "after": expected_variance(config, parsed, level_shares, query_shares),
        "optimum": d2 * sum(sqrt(w) for w in parsed.values()) ** 2 / (2 * rho),
        "weights": {f"{lv}:{q}": w for (lv, q), w in parsed.items()},
        "path": None,
    }
    if out_path is not None:
        header = "weights " + ", ".join(f"{k}={w:g}" for k, w in result["weights"].items() if w > 0)
        result["path"] = str(write_shares(config_path, level_shares, query_shares, out_path, header))
    return result


def write_shares(config_path: str | Path, level_shares: dict[str, Fraction], query_shares: dict[Key, Fraction],
                 out_path: str | Path, why: str) -> Path:
    """The configuration at ``config_path`` with these shares, written to ``out_path`` (checked to load first),
    its first line saying it was written by ``censusdp budget optimize`` and ``why``."""
    config = load_config(config_path)
    raw = tomllib.loads(Path(config_path).read_text())
    units = raw.get("units")
    if isinstance(units, dict) and "level_shares" not in units:  # the units keep the shares they had
        units["level_shares"] = dict(raw["budget"]["level_shares"])
    raw["budget"]["level_shares"] = {lv: str(s) for lv, s in level_shares.items()}
    if Path(out_path).resolve().parent != Path(config_path).resolve().parent:  # another folder: the same files
        _absolute_paths(raw, Path(config_path).resolve().parent)
    for lv in (level.name for level in config.levels):
        table = raw["strategy"][lv]
        for key in [k for k in table if k != "mechanism"]:
            table[key] = str(query_shares[(lv, config.schema.parse_query(key).name)])
    parse_config(raw, str(out_path), Path(out_path).resolve().parent)  # the result must load where it is written
    text = f"# written by `censusdp budget optimize` from {Path(config_path).name}: {why}\n" + tomli_w.dumps(raw)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(text)
    return Path(out_path)


PATH_KEYS = (("input", "path"), ("input", "geography"), ("units", "path"), ("output", "dir"), ("ledger", "path"))


def _absolute_paths(raw: dict[str, Any], base: Path) -> None:
    """Relative paths of the configuration made absolute from ``base`` (its folder), so that a copy written
    elsewhere names the same files; a ledger URL is left as it is."""
    for table, key in PATH_KEYS:
        value = raw.get(table, {}).get(key) if isinstance(raw.get(table), dict) else None
        if isinstance(value, str) and "://" not in value and not Path(value).expanduser().is_absolute():
            raw[table][key] = str(base / value)
