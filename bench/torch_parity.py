#!/usr/bin/env python3
"""PyTorch side of bench/torch_parity.cpp (run right after it by scripts/gpu_run.sh): checks that
Ember's outputs and gradients match PyTorch's for the layers of issues #4 and #5.

For every DIR/<case>.safetensors written by `bench_torch_parity` it recomputes the op with
torch.nn.functional (or torch) on the same device, with TF32 off and cuDNN deterministic, from the
same inputs (input.*, the ones Ember recorded as channels_last made channels_last here too),
backpropagates the same upstream gradient (input.grad_output) and compares
  ember.output         with torch's output
  ember.grad.<name>    with the gradient of input.<name>
  ember.<name>         with input.<name> after the call (running statistics updated in place)
Errors are max |ember - torch| / max |torch| per tensor. float32 cases run torch in float32 and
pass at 1e-4; bfloat16 cases run torch in float32 on the (exactly representable) bfloat16 inputs
and pass at 3e-2, so the reference is the op's exact value for the inputs Ember saw, not another
rounding of it.

Prints one JSON line per case
  {"bench":"torch_parity","impl":"torch","shape":"<case>","max_rel_err":...,"worst":"<tensor>","pass":true}
and exits non-zero if any case fails (or there are no files). Needs only torch: the safetensors
files are parsed here (8-byte header length, JSON header, raw little-endian bytes).

  python3 bench/torch_parity.py [--dir DIR]   DIR defaults to $EMBER_TORCH_PARITY_DIR, else
                                              /tmp/ember_torch_parity (where the executable wrote)
"""
import argparse
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

TOLERANCE = {"float32": 1e-4, "bfloat16": 3e-2}

SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool,
}


def load_safetensors(path):
    """(tensors by name, metadata) of a safetensors file, without the safetensors package."""
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len].decode("utf-8"))
    metadata = header.pop("__metadata__", {}) or {}
    body = memoryview(data)[8 + header_len:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = SAFETENSORS_DTYPES[info["dtype"]]
        shape = info["shape"]
        if end > begin:
            flat = torch.frombuffer(bytearray(body[begin:end]), dtype=dtype)
        else:
            flat = torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(shape).clone()
    return tensors, metadata


def torch_function(op):
    """The torch function a case names: torch.nn.functional's, else torch's (sigmoid, tanh)."""
    if op in ("sigmoid", "tanh"):
        return getattr(torch, op)
    return getattr(F, op)


def rel_err(ember, ref):
    if tuple(ember.shape) != tuple(ref.shape):
        return float("inf")
    if ref.numel() == 0:
        return 0.0
    a, b = ember.detach().double().cpu(), ref.detach().double().cpu()
    if not torch.isfinite(a).all() or not torch.isfinite(b).all():
        return 0.0 if torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(
            a.nan_to_num(0.0), b.nan_to_num(0.0)) else float("inf")
    scale = b.abs().max().item()
    err = (a - b).abs().max().item()
    return err / scale if scale > 0 else err


def check_case(path, device):
    tensors, meta = load_safetensors(path)
    op, dtype_name = meta["op"], meta["dtype"]
    params = json.loads(meta.get("params", "{}"))
    channels_last = set(json.loads(meta.get("channels_last", "[]")))
    tol = TOLERANCE[dtype_name]

    def prepare(name, t):
        t = t.to(device)
        if t.is_floating_point() and t.dtype != torch.float64:
            t = t.float()  # bfloat16 cases: the exact reference of the bfloat16 values
        if name in channels_last:
            t = t.contiguous(memory_format=torch.channels_last)
        return t

    inputs = {}
    for key, t in tensors.items():
        if key.startswith("input.") and key != "input.grad_output":
            name = key[len("input."):]
            inputs[name] = prepare(name, t)
            if "ember.grad." + name in tensors:
                inputs[name].requires_grad_(True)
    x = inputs.pop("x")
    out = torch_function(op)(x, **inputs, **params)
    out.backward(prepare("grad_output", tensors["input.grad_output"]))

    errors = {"output": rel_err(tensors["ember.output"], out)}
    all_inputs = dict(inputs, x=x)
    for key, t in tensors.items():
        if key.startswith("ember.grad."):
            name = key[len("ember.grad."):]
            grad = all_inputs[name].grad
            errors["grad." + name] = rel_err(t, grad) if grad is not None else float("inf")
        elif key.startswith("ember.") and key != "ember.output":
            name = key[len("ember."):]
            errors[name] = rel_err(t, all_inputs[name])  # state updated in place by torch too
    worst = max(errors, key=errors.get)
    return {"max_rel_err": errors[worst], "worst": worst, "pass": errors[worst] <= tol, "op": op,
            "dtype": dtype_name, "device": str(device)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_dir = os.environ.get("EMBER_TORCH_PARITY_DIR") or "/tmp/ember_torch_parity"
    parser.add_argument("--dir", default=default_dir, help="where bench_torch_parity wrote its files")
    args = parser.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    files = sorted(f for f in os.listdir(args.dir) if f.endswith(".safetensors")) if os.path.isdir(args.dir) else []
    if not files:
        print(json.dumps({"bench": "torch_parity", "impl": "torch", "shape": "all", "pass": False,
                          "error": f"no .safetensors files in {args.dir}: run bench_torch_parity first"}))
        return 1
    failed = 0
    for f in files:
        case = f[: -len(".safetensors")]
        line = {"bench": "torch_parity", "impl": "torch", "shape": case}
        try:
            line.update(check_case(os.path.join(args.dir, f), device))
        except Exception as e:  # reported on the case's line, and the other cases still run
            line.update({"pass": False, "error": f"{type(e).__name__}: {e}"})
        failed += not line["pass"]
        print(json.dumps(line), flush=True)
    print(f"torch_parity: {len(files) - failed} of {len(files)} cases pass", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
