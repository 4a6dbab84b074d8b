#!/usr/bin/env python3
"""Checks Ember's LSTM / GRU / RNN against torch.nn.LSTM / GRU / RNN given the same weights (run on
the GPU machine, where PyTorch and its safetensors package are installed).

1. export  runs `bench_rnn --export DIR`: for each case Ember writes DIR/<case>.safetensors holding
           its module's state_dict under PyTorch's names (weight_ih_l0, bias_hh_l1_reverse,
           weight_hr_l0, ...), the inputs (x, h0, c0, lengths, and the upstream gradients of
           output, h_n, c_n), and Ember's outputs and gradients; the module options are metadata.
2. torch   for each file, builds the same torch module, loads the state_dict strictly (so names,
           shapes and gate order must be PyTorch's), runs it on the same device with TF32 off
           (lengths through pack_padded_sequence(enforce_sorted=False) / pad_packed_sequence,
           which is what Ember's lengths mean), backpropagates the same upstream gradients and
           compares output, h_n, c_n and the gradients of x, h0, c0 and every parameter.
3. import  for each float32 case, a freshly initialised torch module's state_dict, inputs and
           outputs go into a file that `bench_rnn --import FILE` loads into Ember (strict) and
           runs; Ember reports its difference from PyTorch's outputs.

Prints one JSON object (also written to --out, default $OUT/rnn_torch.json) and exits non-zero
unless every comparison passed.

  python3 scripts/check_rnn_torch.py --bench build-gpu/bench/bench_rnn
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2}


def find_bench(explicit):
    if explicit:
        return explicit
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for build in (os.environ.get("EMBER_BUILD_DIR", ""), os.path.join(root, "build-gpu"), os.path.join(root, "build")):
        path = os.path.join(build, "bench", "bench_rnn")
        if build and os.path.isfile(path):
            return path
    return None


def rel_err(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    if a.shape != b.shape:
        return float("inf")
    scale = max(1.0, b.abs().max().item() if b.numel() else 1.0)
    return (a - b).abs().max().item() / scale if a.numel() else 0.0


def build_module(torch, meta):
    kind = meta["module"]
    common = dict(num_layers=int(meta["num_layers"]), bidirectional=meta["bidirectional"] == "1",
                  batch_first=meta["batch_first"] == "1")
    args = (int(meta["input_size"]), int(meta["hidden_size"]))
    if kind == "LSTM":
        return torch.nn.LSTM(*args, proj_size=int(meta["proj_size"]), **common)
    if kind == "GRU":
        return torch.nn.GRU(*args, **common)
    return torch.nn.RNN(*args, nonlinearity=meta["nonlinearity"], **common)


def run_torch(torch, module, meta, x, h0, c0, lengths):
    """The module on x, with PyTorch's packed sequences when lengths are given (output padded to T)."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
    batch_first = meta["batch_first"] == "1"
    hx = (h0, c0) if meta["module"] == "LSTM" else h0
    if lengths is None:
        out, state = module(x, hx)
    else:
        total = x.shape[1] if batch_first else x.shape[0]
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=batch_first, enforce_sorted=False)
        out, state = module(packed, hx)
        out, _ = pad_packed_sequence(out, batch_first=batch_first, total_length=total)
    h_n, c_n = state if meta["module"] == "LSTM" else (state, None)
    return out, h_n, c_n


def compare_export(torch, path):
    from safetensors import safe_open
    from safetensors.torch import load_file
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
    data = load_file(path)
    device = torch.device(meta["device"] if torch.cuda.is_available() else "cpu")
    dtype = getattr(torch, meta["dtype"])
    module = build_module(torch, meta)
    names = list(module.state_dict().keys())
    state = {k: v for k, v in data.items() if not k.startswith(("input.", "ember."))}
    result = {"names_match": sorted(state.keys()) == sorted(names)}
    module.load_state_dict(state, strict=True)
    module = module.to(device, dtype)
    get = lambda k: data[k].to(device) if k in data else None
    x = get("input.x").requires_grad_()
    h0 = get("input.h0").requires_grad_()
    c0 = get("input.c0")
    if c0 is not None:
        c0.requires_grad_()
    lengths = data.get("input.lengths")
    out, h_n, c_n = run_torch(torch, module, meta, x, h0, c0, lengths)
    loss = (out * get("input.grad_output")).sum() + (h_n * get("input.grad_h_n")).sum()
    if c_n is not None:
        loss = loss + (c_n * get("input.grad_c_n")).sum()
    loss.backward()
    tol = TOLERANCE[meta["dtype"]]
    errors = {"output": rel_err(data["ember.output"], out), "h_n": rel_err(data["ember.h_n"], h_n)}
    if c_n is not None:
        errors["c_n"] = rel_err(data["ember.c_n"], c_n)
    grads = {"x": x.grad, "h0": h0.grad}
    if c0 is not None:
        grads["c0"] = c0.grad
    for name, p in module.named_parameters():
        grads[name] = p.grad
    for name, g in grads.items():
        key = "ember.grad." + name
        errors["grad." + name] = rel_err(data[key], g) if key in data and g is not None else float("inf")
    worst = max(errors.items(), key=lambda kv: kv[1])
    result.update(dtype=meta["dtype"], device=str(device), max_rel_err=worst[1], worst=worst[0],
                  ok=bool(result["names_match"] and all(
                      v <= (4 * tol if k.startswith("grad.") else tol) for k, v in errors.items())))
    return result


def import_case(torch, bench, path, workdir, name):
    """A fresh torch module of the same configuration; Ember loads its state and reproduces its outputs."""
    from safetensors import safe_open
    from safetensors.torch import save_file
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
    if meta["dtype"] != "float32":
        return None
    torch.manual_seed(11)
    module = build_module(torch, meta).eval()
    ld = int(meta["num_layers"]) * (2 if meta["bidirectional"] == "1" else 1)
    out_size = int(meta.get("proj_size", "0")) or int(meta["hidden_size"])
    T, B = 6, 4
    x = torch.randn((B, T, int(meta["input_size"])) if meta["batch_first"] == "1" else (T, B, int(meta["input_size"])))
    h0 = torch.randn(ld, B, out_size) * 0.5
    c0 = torch.randn(ld, B, int(meta["hidden_size"])) * 0.5 if meta["module"] == "LSTM" else None
    lengths = torch.tensor([6, 2, 5, 1], dtype=torch.int64)
    with torch.no_grad():
        out, h_n, c_n = run_torch(torch, module, meta, x, h0, c0, lengths)
    tensors = {k: v.contiguous() for k, v in module.state_dict().items()}
    tensors.update({"input.x": x, "input.h0": h0, "input.lengths": lengths, "torch.output": out.contiguous(),
                    "torch.h_n": h_n.contiguous()})
    if c0 is not None:
        tensors.update({"input.c0": c0, "torch.c_n": c_n.contiguous()})
    file = os.path.join(workdir, f"torch_{name}.safetensors")
    save_file(tensors, file, metadata=dict(meta, dtype="float32"))
    proc = subprocess.run([bench, "--import", file], capture_output=True, text=True, timeout=300)
    result = {"rc": proc.returncode}
    for line in proc.stdout.splitlines():
        if line.startswith("{") and '"rnn_import"' in line:
            result["max_rel_err"] = json.loads(line)["max_rel_err"]
    if "max_rel_err" not in result:
        result["output_tail"] = (proc.stdout + proc.stderr)[-2000:]
    result["ok"] = proc.returncode == 0 and result.get("max_rel_err", float("inf")) <= TOLERANCE["float32"]
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", help="path of bench_rnn (default: build-gpu/ or build/ under the repo)")
    parser.add_argument("--out", help="JSON result file")
    args = parser.parse_args()
    out_path = args.out or os.path.join(os.environ.get("OUT", "."), "rnn_torch.json")
    report = {"ok": False}
    bench = find_bench(args.bench)
    if bench is None:
        report["error"] = "bench_rnn not found: build the benchmarks or pass --bench"
    else:
        import torch
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        report.update(torch_version=torch.__version__, bench=bench)
        with tempfile.TemporaryDirectory(prefix="ember_rnn_torch_") as workdir:
            proc = subprocess.run([bench, "--export", workdir], capture_output=True, text=True, timeout=600)
            report["export_rc"] = proc.returncode
            files = sorted(f for f in os.listdir(workdir) if f.endswith(".safetensors"))
            if proc.returncode != 0 or not files:
                report["export_output"] = (proc.stdout + proc.stderr)[-3000:]
            cases = {}
            for f in files:
                name = f[: -len(".safetensors")]
                path = os.path.join(workdir, f)
                try:
                    cases[name] = {"export": compare_export(torch, path)}
                    imported = import_case(torch, bench, path, workdir, name)
                    if imported is not None:
                        cases[name]["import"] = imported
                except Exception as e:  # reported in the JSON, not a traceback lost in a log
                    cases[name] = {"error": f"{type(e).__name__}: {e}"}
            report["cases"] = cases
            report["ok"] = bool(proc.returncode == 0 and cases and all(
                c.get("export", {}).get("ok") and c.get("import", {"ok": True}).get("ok") for c in cases.values()))
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
