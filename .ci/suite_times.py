"""Seconds of test time per suite (tests/<suite>/), from pytest's JUnit XML: where CI's
time goes, printed at the end of every run. With xdist the sum exceeds the wall time."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def main(path: str) -> None:
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for case in ET.parse(path).iter("testcase"):  # noqa: S314 - our own pytest's output
        parts = case.get("classname", "").split(".")
        suite = parts[1] if len(parts) > 2 and parts[0] == "tests" else "(top level)"
        seconds[suite] += float(case.get("time", 0))
        counts[suite] += 1
    print(f"{'suite':14} {'tests':>6} {'seconds':>9}")
    for suite in sorted(seconds, key=seconds.get, reverse=True):
        print(f"{suite:14} {counts[suite]:6} {seconds[suite]:9.0f}")
    print(f"{'all':14} {sum(counts.values()):6} {sum(seconds.values()):9.0f}")


if __name__ == "__main__":
    main(sys.argv[1])
