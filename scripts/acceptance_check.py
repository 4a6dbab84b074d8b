#!/usr/bin/env python3
"""Verdicts for scripts/acceptance.sh: reads the logs of one acceptance part, prints one JSON line
(with "pass": true/false and the figures) and exits 0 when the part passed, 1 when it did not.
Standard library only.

  fmnist LOG BAR_PERCENT          the resnet example's epoch lines: final and best test accuracy,
                                  train images/s, seconds; passes when the final accuracy >= BAR
  charlm EMBER_LOG TORCH_JSON TOL the last "step N: ... val loss X" line of examples/lstm against
                                  charlm_torch.py's JSON; passes when |ember - torch| / torch <= TOL
                                  at the same step
  graphs EAGER_LOG GRAPHED_LOG EAGER_CKPT GRAPHED_CKPT
                                  the per-step progress lines (running loss and accuracy at every
                                  step, --log-interval 1) and the final checkpoints (safetensors,
                                  every tensor byte for byte): passes when they are all equal
  ddp LOG                         the launched example finished an epoch with a finite loss
"""
import json
import math
import re
import struct
import sys

EPOCH = re.compile(r"epoch (\d+)/(\d+): train loss ([-\d.naninf]+) acc ([\d.]+)% \| test acc ([\d.]+)% \| "
                   r"(\d+) img/s \| ([\d.]+) s")
PROGRESS = re.compile(r"epoch (\d+)/\d+ \[[#.]*\] (\d+)/\d+ loss ([-\d.naninf]+) acc ([\d.]+)%")
CHARLM = re.compile(r"step (\d+): train loss ([-\d.naninf]+) \| val loss ([-\d.naninf]+) \| (\d+) tokens/s")


def read_text(path):
    with open(path, "rb") as f:
        # The progress bar redraws with carriage returns: each redraw is a line of its own.
        return f.read().decode("utf-8", errors="replace").replace("\r", "\n")


def finish(result):
    print(json.dumps(result))
    return 0 if result["pass"] else 1


def fmnist(log, bar):
    epochs = [m.groups() for m in EPOCH.finditer(read_text(log))]
    if not epochs:
        return finish({"part": "fmnist", "pass": False, "error": "no epoch line in the log"})
    accs = [float(e[4]) for e in epochs]
    return finish({"part": "fmnist", "pass": accs[-1] >= bar, "bar_percent": bar, "epochs_done": len(epochs),
                   "epochs": int(epochs[-1][1]), "final_test_acc": accs[-1], "best_test_acc": max(accs),
                   "train_img_per_s_mean": round(sum(int(e[5]) for e in epochs) / len(epochs)),
                   "train_seconds": round(sum(float(e[6]) for e in epochs), 1)})


def charlm(ember_log, torch_json, tol):
    lines = [m.groups() for m in CHARLM.finditer(read_text(ember_log))]
    r = {"part": "charlm", "pass": False, "tolerance": tol}
    try:
        with open(torch_json) as f:
            t = json.load(f)
    except (OSError, ValueError) as e:
        r["error"] = f"no PyTorch result ({e})"
        return finish(r)
    if not lines:
        r["error"] = "no 'step N: ... val loss' line in Ember's log"
        return finish(r)
    step, train, val, tps = lines[-1]
    r.update(step=int(step), ember_val_loss=float(val), torch_val_loss=t.get("val_loss"),
             ember_train_loss=float(train), torch_train_loss=t.get("train_loss"), ember_tokens_per_s=int(tps),
             torch_tokens_per_s=round(t.get("tokens_per_s", 0)), torch_step=t.get("step"))
    if t.get("step") != int(step) or not isinstance(t.get("val_loss"), float):
        r["error"] = "the two runs did not end at the same step"
        return finish(r)
    rel = abs(float(val) - t["val_loss"]) / t["val_loss"]
    r["relative_difference"] = round(rel, 5)
    r["pass"] = math.isfinite(float(val)) and rel <= tol
    return finish(r)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}, meta


def max_abs_diff(dtype, a, b):
    """Largest elementwise difference of two float tensors' bytes (None for other dtypes)."""
    if dtype in ("F32", "F64"):
        fmt = "f" if dtype == "F32" else "d"
        x, y = struct.unpack(f"<{len(a) // struct.calcsize(fmt)}{fmt}", a), struct.unpack(f"<{len(b) // struct.calcsize(fmt)}{fmt}", b)
    elif dtype == "BF16":
        widen = lambda raw: struct.unpack(f"<{len(raw) // 2}f", b"".join(b"\0\0" + raw[i:i + 2] for i in range(0, len(raw), 2)))
        x, y = widen(a), widen(b)
    else:
        return None
    return max((abs(p - q) for p, q in zip(x, y)), default=0.0)


def graphs(eager_log, graphed_log, eager_ckpt, graphed_ckpt):
    r = {"part": "graphs", "pass": False}
    steps = []
    for log in (eager_log, graphed_log):
        seen = {}
        for m in PROGRESS.finditer(read_text(log)):
            seen[(int(m.group(1)), int(m.group(2)))] = (m.group(3), m.group(4))
        steps.append(seen)
    finals = [[m.groups()[2:5] for m in EPOCH.finditer(read_text(log))] for log in (eager_log, graphed_log)]
    r["steps_compared"] = len(steps[0])
    r["steps_differing"] = sorted(f"{e}.{s}" for (e, s) in steps[0] if steps[0][(e, s)] != steps[1].get((e, s)))
    r["graphed_log_mentions_graphs"] = "cuda graphs:" in read_text(graphed_log)
    m = re.search(r"cuda graphs: (\d+) captured, (\d+) replays, (\d+) eager steps, (\d+) fallbacks", read_text(graphed_log))
    if m:
        r.update(captures=int(m.group(1)), replays=int(m.group(2)), eager_steps=int(m.group(3)), fallbacks=int(m.group(4)))
    r["epoch_lines_equal"] = bool(finals[0]) and finals[0] == finals[1]
    try:
        (a, meta_a), (b, meta_b) = read_safetensors(eager_ckpt), read_safetensors(graphed_ckpt)
    except (OSError, ValueError, struct.error) as e:
        r["error"] = f"cannot read the checkpoints ({e})"
        return finish(r)
    differing = {}
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            differing[name] = "only in one checkpoint"
        elif a[name] != b[name]:
            differing[name] = max_abs_diff(a[name][0], a[name][2], b[name][2]) if a[name][:2] == b[name][:2] else "shape"
    r["tensors_compared"] = len(set(a) | set(b))
    r["tensors_differing"] = dict(list(differing.items())[:20])
    r["tensors_differing_count"] = len(differing)
    r["metadata_equal"] = meta_a == meta_b
    r["pass"] = bool(steps[0]) and not r["steps_differing"] and len(steps[0]) == len(steps[1]) and \
        r["epoch_lines_equal"] and not differing and r.get("replays", 0) > 0
    return finish(r)


def ddp(log):
    text = read_text(log)
    epochs = [m.groups() for m in EPOCH.finditer(text)]
    r = {"part": "ddp", "pass": False, "ranks": re.findall(r"batch \d+ x (\d+) rank", text)[:1]}
    if epochs:
        loss = float(epochs[-1][2])
        r.update(train_loss=loss, test_acc=float(epochs[-1][4]), img_per_s=int(epochs[-1][5]))
        r["pass"] = math.isfinite(loss)
    else:
        r["error"] = "no epoch line in the log"
    return finish(r)


def main(argv):
    parts = {"fmnist": (fmnist, 2), "charlm": (charlm, 3), "graphs": (graphs, 4), "ddp": (ddp, 1)}
    if len(argv) < 2 or argv[1] not in parts or len(argv) - 2 != parts[argv[1]][1]:
        print(__doc__, file=sys.stderr)
        return 2
    fn, _ = parts[argv[1]]
    args = argv[2:]
    if argv[1] == "fmnist":
        args = [args[0], float(args[1])]
    elif argv[1] == "charlm":
        args = [args[0], args[1], float(args[2])]
    return fn(*args)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
