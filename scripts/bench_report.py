# Reads the JSON lines of one gpu_run (bench.jsonl) and prints Ember vs PyTorch side by side:
# for each (bench, shape) the metric of both and the ratio (>1 means Ember is better).
import json, sys

path = sys.argv[1] if len(sys.argv) > 1 else "out/bench.jsonl"
rows = {}
extra = []
for line in open(path):
    line = line.strip()
    if not line.startswith("{"):
        continue
    try:
        r = json.loads(line)
    except json.JSONDecodeError:
        continue
    if "impl" not in r or "shape" not in r:
        extra.append(r)
        continue
    rows.setdefault((r["bench"], r["shape"]), {})[r["impl"]] = r

higher_better = ("GBps", "TFLOPs", "img_per_s", "tokens_per_s")
print(f"{'bench':<16} {'shape':<28} {'metric':<10} {'ember':>10} {'torch':>10} {'ratio':>7}")
for (bench, shape), impls in sorted(rows.items()):
    e, t = impls.get("ember"), impls.get("torch")
    ref = e or t
    metric = next((m for m in higher_better if m in ref), None) or \
        next((m for m in ("us_per_op", "ms", "ns_per_lookup") if m in ref), None)
    if metric is None:
        continue
    ev = e.get(metric) if e else None
    tv = t.get(metric) if t else None
    ratio = ""
    if ev and tv:
        ratio = f"{(ev / tv if metric in higher_better else tv / ev):.3f}"
    f = lambda v: f"{v:10.3f}" if isinstance(v, (int, float)) else f"{'-':>10}"
    print(f"{bench:<16} {shape:<28} {metric:<10} {f(ev)} {f(tv)} {ratio:>7}")
for r in extra:
    print(json.dumps(r))
