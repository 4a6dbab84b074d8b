# Reads the JSON lines of one gpu_run (bench.jsonl) and prints Ember vs PyTorch side by side:
# for each (bench, shape) the metric of both and the ratio (>1 means Ember is better), then, where
# the lines carry them, the spread of the step times (spread_ms: [p10, p90], or spread) and the
# peak device memory (peak_MiB) of each side. A row measured by one side only shows '-' for the
# other; lines without impl/shape (skips, errors, exports) and reference rows of neither side
# (impl "cuda": the memory ceilings of bench_bandwidth, the launch floor) are printed as they are
# at the end.
import json
import sys

HIGHER_BETTER = ("GBps", "TFLOPs", "img_per_s", "tokens_per_s")
LOWER_BETTER = ("us_per_op", "ms", "ns_per_lookup")


def load(path):
    rows, extra = {}, []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(r, dict) or "impl" not in r or "shape" not in r or "bench" not in r:
                extra.append(r)
                continue
            rows.setdefault((str(r["bench"]), str(r["shape"])), {})[str(r["impl"])] = r
    return rows, extra


def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def spread(r):
    """'p10-p90' of a line's step times, or '' when it has none."""
    if not r:
        return ""
    s = r.get("spread_ms", r.get("spread"))
    if isinstance(s, (list, tuple)) and len(s) == 2 and all(number(v) for v in s):
        return f"{s[0]:.4g}-{s[1]:.4g}"
    return str(s) if isinstance(s, str) else ""


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "out/bench.jsonl"
    rows, extra = load(path)
    show_spread = any(spread(r) for impls in rows.values() for r in impls.values())
    show_peak = any(number(r.get("peak_MiB")) for impls in rows.values() for r in impls.values())
    header = f"{'bench':<16} {'shape':<28} {'metric':<12} {'ember':>10} {'torch':>10} {'ratio':>7}"
    if show_spread:
        header += f" {'ember spread':>15} {'torch spread':>15}"
    if show_peak:
        header += f" {'ember MiB':>10} {'torch MiB':>10}"
    print(header)
    fmt = lambda v: f"{v:10.3f}" if number(v) else f"{'-':>10}"
    for (bench, shape), impls in sorted(rows.items()):
        e, t = impls.get("ember"), impls.get("torch")
        sides = [r for r in (e, t) if r]
        if not sides:  # neither side's: a reference measurement (impl "cuda": bench_bandwidth, ...)
            extra.extend(impls.values())
            continue
        # The first metric either side reports (a side may have only skipped or failed).
        metric = next((m for m in HIGHER_BETTER + LOWER_BETTER if any(number(r.get(m)) for r in sides)), None)
        if metric is None:
            extra.extend(sides)
            continue
        ev = e.get(metric) if e else None
        tv = t.get(metric) if t else None
        ratio = ""
        if number(ev) and number(tv) and ev > 0 and tv > 0:
            ratio = f"{(ev / tv if metric in HIGHER_BETTER else tv / ev):.3f}"
        line = f"{bench:<16} {shape:<28} {metric:<12} {fmt(ev)} {fmt(tv)} {ratio:>7}"
        if show_spread:
            line += f" {spread(e) or '-':>15} {spread(t) or '-':>15}"
        if show_peak:
            line += f" {fmt(e.get('peak_MiB') if e else None)} {fmt(t.get('peak_MiB') if t else None)}"
        print(line)
    # Correctness rows (bench/torch_parity: Ember vs PyTorch outputs and gradients) are summarised:
    # one line with the counts, then only the failing cases.
    parity = [r for r in extra if r.get("bench") == "torch_parity" and r.get("impl") == "torch"]
    written = [r for r in extra if r.get("bench") == "torch_parity" and r.get("impl") == "ember"]
    if parity or written:
        failed = [r for r in parity if not r.get("pass")]
        worst = max((r.get("max_rel_err", 0) or 0 for r in parity), default=0)
        print(f"torch_parity: {len(parity) - len(failed)}/{len(parity)} cases match PyTorch "
              f"(largest relative error {worst:.2e}); {sum(1 for r in written if r.get('written'))}"
              f"/{len(written)} written by Ember")
        for r in failed + [r for r in written if not r.get("written")]:
            print(json.dumps(r))
    for r in extra:
        if r.get("bench") != "torch_parity":
            print(json.dumps(r))


if __name__ == "__main__":
    main()
