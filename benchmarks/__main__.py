"""`python -m benchmarks [--quick] [--keep] [--only SECTION ...] [--out docs/benchmarks.md]`.

Runs each section in its own subprocess, prints its figures as they come, and
writes the report (machine description, figures, targets) to --out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import report
from .common import ROOT

SECTIONS = (
    "step_overhead",
    "step_sizes",
    "throughput",
    "recovery",
    "approval",
    "dashboard",
    "memory",
    "langgraph_saver",
    "inflight",
    "team_load",
    "long_run_page",
)
# A section that overruns is stopped, so `make bench` always ends and says so.
TIMEOUT = {"quick": 150, "full": 900}
# Sections that start a web service and log hundreds of people in need longer.
SECTION_TIMEOUT = {"team_load": {"quick": 360, "full": 900}}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="small sizes, under 3 minutes")
    parser.add_argument("--keep", action="store_true", help="keep the big dashboard database")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, help="run only these sections")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="rewrite --out from its .json (e.g. after editing ANALYSIS.md)",
    )
    args = parser.parse_args()
    raw = args.out.with_suffix(".json")
    if args.render_only:
        record = json.loads(raw.read_text())
        args.out.write_text(
            report.render(
                record["results"],
                record["machine"],
                record["machine"],
                quick=record["quick"],
                elapsed=record.get("elapsed", 0),
            )
        )
        return 0
    previous = _previous(raw, args) if args.only else {}
    machine_before = report.machine()
    results: dict[str, Any] = {}
    started = time.perf_counter()
    for section in args.only or SECTIONS:
        results[section] = run_section(section, args)
        print(report.section_text(section, results[section]), flush=True)
        print(f"   ({results[section]['elapsed_s']:.0f} s)", flush=True)
    elapsed = time.perf_counter() - started
    machine_after = report.machine()
    if previous:
        # --only reruns some sections: keep the others' figures, and say when they are from.
        results = {
            name: results.get(name, previous["results"].get(name))
            for name in SECTIONS
            if name in results or name in previous["results"]
        }
    text = report.render(results, machine_before, machine_after, quick=args.quick, elapsed=elapsed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    record = {
        "quick": args.quick,
        "machine": machine_before,
        "results": results,
        "elapsed": elapsed,
    }
    raw.write_text(json.dumps(record, indent=1, default=str))
    print(f"\nwrote {args.out} and {raw.name} ({elapsed:.0f} s in all)")
    return 0


def _previous(raw: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The last run's results, if it was of the same mode, to complete a partial rerun."""
    try:
        previous = json.loads(raw.read_text())
    except (OSError, ValueError):
        return {}
    return previous if previous.get("quick") == args.quick else {}


def run_section(section: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        out = Path(tmp) / "result.json"
        command = [sys.executable, "-m", f"benchmarks.{section}", "--json", str(out)]
        command += ["--quick"] * args.quick + ["--keep"] * args.keep
        print(f"== {section} ...", flush=True)
        started = time.perf_counter()
        try:
            proc = subprocess.run(
                command,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=SECTION_TIMEOUT.get(section, TIMEOUT)["quick" if args.quick else "full"],
            )
        except subprocess.TimeoutExpired:
            return {"error": "timed out", "elapsed_s": time.perf_counter() - started}
        elapsed = time.perf_counter() - started
        if proc.returncode != 0 or not out.exists():
            return {"error": proc.stderr[-3000:] or f"exit {proc.returncode}", "elapsed_s": elapsed}
        result = json.loads(out.read_text())
        result["elapsed_s"] = elapsed
        # Sections may come from different runs (--only): each says when it was taken.
        result["measured_at"] = report.machine_now()
        return result


if __name__ == "__main__":
    sys.exit(main())
