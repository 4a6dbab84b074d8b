#!/usr/bin/env python3
"""Compares two gpu_run outputs (bench.jsonl), BEFORE and AFTER a change, row by row.

For every (bench, shape, impl) row of Ember (impl "ember", "ember_heuristic" or "ember:<algo>") with
a time (ms, us, us_per_op, ns_per_*) or a rate (GBps, TFLOPs, img_per_s, tokens_per_s) in both
files, prints AFTER's speed over BEFORE's (>1: faster after). Where PyTorch ran the same row in
both runs, the ratio is also given normalised by PyTorch's own change between the runs, which
takes out the drift of the machine (clocks, a different card of the same kind). A row counts as
slower when both ratios are below 1 - threshold.

Usage: python3 scripts/bench_compare.py BEFORE.jsonl AFTER.jsonl [--threshold 0.02] [--all]
"""
import argparse
import json

RATES = ("GBps", "TFLOPs", "img_per_s", "tokens_per_s")
TIMES = ("ms", "us", "us_per_op", "ns_per_lookup", "ns_per_key")


def load(path):
    rows = {}
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(r, dict) or "bench" not in r:
            continue
        key = (str(r["bench"]), str(r.get("shape", "")), str(r.get("impl", "ember")))
        rows[key] = r
    return rows


def speed(r):
    """(metric, value) where larger value means faster, or None."""
    for m in RATES:
        if isinstance(r.get(m), (int, float)) and r[m] > 0:
            return m, float(r[m])
    for m in TIMES:
        if isinstance(r.get(m), (int, float)) and r[m] > 0:
            return m, 1.0 / float(r[m])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--threshold", type=float, default=0.02)
    ap.add_argument("--all", action="store_true", help="print every row, not only the slower ones")
    a = ap.parse_args()
    before, after = load(a.before), load(a.after)
    compared, slower, lines = 0, [], []
    for key in sorted(before):
        bench, shape, impl = key
        if not impl.startswith("ember") or key not in after:
            continue
        sb, sa = speed(before[key]), speed(after[key])
        if not sb or not sa or sb[0] != sa[0]:
            continue
        compared += 1
        raw = sa[1] / sb[1]
        norm = None
        tkey = (bench, shape, "torch")
        if tkey in before and tkey in after:
            tb, ta = speed(before[tkey]), speed(after[tkey])
            if tb and ta and tb[0] == ta[0]:
                norm = raw / (ta[1] / tb[1])
        is_slower = raw < 1 - a.threshold and (norm is None or norm < 1 - a.threshold)
        text = (f"{bench:<26} {shape[:40]:<40} {impl[:34]:<34} {sb[0]:<10} {raw:7.3f} "
                f"{norm if norm is not None else float('nan'):7.3f}{'  SLOWER' if is_slower else ''}")
        if is_slower:
            slower.append(text)
        if a.all or is_slower:
            lines.append(text)
    print(f"{'bench':<26} {'shape':<40} {'impl':<34} {'metric':<10} {'after/before':>7} "
          f"{'vs torch':>7}")
    for t in lines:
        print(t)
    print(f"bench_compare: {compared} rows compared, {len(slower)} slower by more than "
          f"{a.threshold:.0%} (raw and PyTorch-normalised)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
