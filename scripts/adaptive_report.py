#!/usr/bin/env python3
"""The table of issue 32's bars from scripts/bench_adaptive.sh's JSON lines (adaptive.jsonl).

Usage: scripts/adaptive_report.py adaptive.jsonl
Prints the varying-resolution loop (every mode, Ember and PyTorch, with the cache's work and the
graphed loop's captures), the first ResNet-50 step and the step time after 20 steps (benchmark vs
adaptive), and the static rows (the median of the repeated runs of each mode), each bar with its
verdict: varying adaptive <= 0.30 s and <= heuristic; static adaptive within 2% of benchmark;
first ResNet-50 step <= 3 s and its later step time within 2%.
"""
import json
import statistics
import sys
from collections import defaultdict


def main(path):
    rows = [json.loads(l) for l in open(path) if l.strip().startswith("{")]
    verdicts = []

    def bar(name, ok, detail):
        verdicts.append(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")

    varying = [r for r in rows if r.get("row") == "cifar18_varying_res"]
    print("## cifar18_varying_res (60 steps, resolution 24..40 per step; total wall time)")
    print(f"{'impl':8} {'mode':26} {'total_s':>8}  cache work / graphs")
    by_mode = {}
    for r in varying:
        by_mode[(r.get("impl"), r.get("mode"))] = r.get("total_s")
        extra = ""
        if r.get("impl") == "ember":
            extra = (f"shapes_timed={r.get('shapes_timed')} timing_ms={r.get('timing_ms', 0):.0f} "
                     f"candidates={r.get('candidates_timed')} borrowed={r.get('borrowed')} "
                     f"retimed={r.get('retimed')} heuristic={r.get('heuristic_choices')}")
            if "graph_captures" in r:
                extra += f" captures={r['graph_captures']} replays={r['graph_replays']}"
        print(f"{r.get('impl', '?'):8} {r.get('mode', '?'):26} {r.get('total_s', float('nan')):8.3f}  {extra}")
    ad, he = by_mode.get(("ember", "adaptive")), by_mode.get(("ember", "heuristic"))
    tb = by_mode.get(("torch", "cudnn_benchmark_true"))
    if ad is not None:
        bar("varying: adaptive <= 0.30 s", ad <= 0.30, f"{ad:.3f} s")
        if tb:
            print(f"adaptive / torch cudnn.benchmark=True = {ad / tb:.3f}")
        if he is not None:
            bar("varying: adaptive <= heuristic", ad <= he * 1.02, f"{ad:.3f} vs {he:.3f} s (2% noise allowed)")

    print("\n## resnet50_bf16 from an empty cache, 20 warm-up steps")
    r50 = [r for r in rows if r.get("row") == "resnet50_bf16"]
    ember = {r.get("algo_mode"): r for r in r50 if r.get("impl") == "ember"}
    for r in r50:
        print(f"{r.get('impl'):6} {r.get('algo_mode', r.get('impl_detail', '')):10} ms={r.get('ms')} "
              f"first_step_ms={r.get('first_step_ms')} timing_ms={r.get('first_step_benchmark_ms')}")
    if "adaptive" in ember and "benchmark" in ember:
        a, b = ember["adaptive"], ember["benchmark"]
        bar("resnet50: first step <= 3 s", a["first_step_ms"] <= 3000, f"{a['first_step_ms']:.0f} ms "
            f"(benchmark mode: {b['first_step_ms']:.0f} ms)")
        bar("resnet50: step after 20 within 2%", a["ms"] <= b["ms"] * 1.02,
            f"{a['ms']:.3f} vs {b['ms']:.3f} ms ({a['ms'] / b['ms']:.3f})")

    print("\n## static rows: median ms over the repeated runs")
    static = defaultdict(list)
    for r in rows:
        if r.get("row") in ("cifar18_eager", "cifar18_graphed", "charlm_eager", "charlm_graphed"):
            static[(r["row"], r.get("impl"), r.get("algo_mode", "torch"))].append(r["ms"])
    for row in ("cifar18_eager", "cifar18_graphed", "charlm_eager", "charlm_graphed"):
        b = static.get((row, "ember", "benchmark"))
        a = static.get((row, "ember", "adaptive"))
        t = static.get((row, "torch", "torch"))
        if not (a and b):
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        tt = f" torch {statistics.median(t):.3f} ms" if t else ""
        print(f"{row:16} benchmark {mb:.3f} ms  adaptive {ma:.3f} ms  ratio {ma / mb:.3f}{tt}")
        bar(f"static {row}: adaptive within 2%", ma <= mb * 1.02, f"{ma / mb:.3f}")

    print("\n## bars")
    print("\n".join(verdicts) if verdicts else "no bars measured")


if __name__ == "__main__":
    main(sys.argv[1])
