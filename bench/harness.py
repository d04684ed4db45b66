"""The benchmark harness: runs workload modules, prints one markdown table, writes JSON.

A workload module under bench/ exposes `run(quick: bool) -> list[dict]`, one row per
measurement: workload, measurement, unit, value (median of the runs), runs, and optionally
target, peer_name, peer_value, peer_runs, and peers (name -> median) when a row has several
peers (peer_* then being the best of them, the one the ratio is against). Rows in the older
shape (`area`, `peer`) are accepted. A module that fails yields an error row; the others still run."""

from __future__ import annotations

import importlib
import json
import math
import statistics
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Adding a workload is one line here.
REGISTRY: list[str] = [
    "codec_bench",
    "store_bench",
    "broker_bench",
    "e2e_bench",
    "spark_bench",
    "ha_bench",
    "pop_dup_bench",
    "handover_bench",
    "timer_bench",
    "grpc_bench",
    "acl_bench",
    "metrics_bench",
    "trace_bench",
    "hops_bench",
    "tls_bench",
    "scale_bench",
    "fleet_bench",
    "request_cost_bench",
]

RESULTS_DIR = Path(__file__).with_name("results")
LOWER_IS_BETTER_UNITS = {"ms", "s", "µs"}


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else math.nan


def normalize(row: dict[str, Any], module: str) -> dict[str, Any]:
    out = dict(row)
    out.setdefault("workload", out.pop("area", module))
    if "peer_value" not in out and "peer" in out:
        out["peer_value"] = out.pop("peer")
    out.setdefault("module", module)
    return out


def run_module(name: str, quick: bool) -> list[dict[str, Any]]:
    started = time.monotonic()
    try:
        module = importlib.import_module(f"bench.{name}")
        rows = [normalize(r, name) for r in module.run(quick)]
    except Exception as exc:  # one broken workload must not hide the others' figures
        traceback.print_exc()
        return [{"workload": name, "module": name, "measurement": "(failed)", "unit": "",
                 "value": math.nan, "runs": [], "error": f"{type(exc).__name__}: {exc}"}]
    for r in rows:
        r.setdefault("seconds", round(time.monotonic() - started, 1))
    return rows


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, int | float):
        v = float(value)
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
    return str(value)


def ratio(row: dict[str, Any]) -> str:
    ours, peer = row.get("value"), row.get("peer_value")
    if not isinstance(ours, int | float) or not isinstance(peer, int | float) or not peer:
        return "–"
    if math.isnan(float(ours)) or math.isnan(float(peer)):
        return "–"
    r = float(ours) / float(peer)
    if row.get("unit") in LOWER_IS_BETTER_UNITS:
        return f"{r:.2f}× (lower is better)"
    return f"{r:.2f}×"


def _peer_text(row: dict[str, Any], unit: str) -> str:
    """The peer the ratio is against; a row measured against several (`peers`: name ->
    median) names the others after it."""
    peer = row.get("peer_value")
    if peer is None:
        return "–"
    best = row.get("peer_name", "")
    text = f"{_fmt(peer)} {unit} ({best})"
    others = [f"{_fmt(v)} ({name})" for name, v in (row.get("peers") or {}).items()
              if name != best]
    return text + ("; " + "; ".join(others) if others else "")


def render(rows: list[dict[str, Any]]) -> str:
    lines = ["| workload | measurement | ours (median of N) | target | peer (best first) | ratio |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        unit = r.get("unit", "")
        runs = r.get("runs") or []
        if "error" in r:
            ours = f"failed: {r['error']}"
        else:
            ours = f"{_fmt(r.get('value'))} {unit} (n={len(runs)})"
        target = r.get("target")
        if isinstance(target, str):
            target_text = target or "–"  # already says its unit or ratio
        else:
            target_text = f"{_fmt(target)} {unit}" if target is not None else "–"
        peer_text = _peer_text(r, unit)
        lines.append(f"| {r.get('workload', '')} | {r.get('measurement', '')} | {ours} | "
                     f"{target_text} | {peer_text} | {ratio(r)} |")
    return "\n".join(lines)


def write_json(rows: list[dict[str, Any]], quick: bool, directory: Path = RESULTS_DIR) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = directory / f"{stamp}.json"
    payload = {"created": stamp, "quick": quick, "rows": rows}
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, same shape")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help=f"run only this workload module (of {', '.join(REGISTRY)})")
    args = parser.parse_args(argv)
    names = args.only or REGISTRY
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        parser.error(f"unknown workload {unknown}; known: {REGISTRY}")
    rows: list[dict[str, Any]] = []
    for name in names:
        print(f"# running {name}{' (quick)' if args.quick else ''} ...", flush=True)
        rows += run_module(name, args.quick)
    print(render(rows))
    path = write_json(rows, args.quick)
    print(f"\nresults: {path}")
    return 1 if any("error" in r for r in rows) else 0
