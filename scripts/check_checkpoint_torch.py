#!/usr/bin/env python3
"""Checks that Ember's safetensors checkpoints and PyTorch's are interchangeable (run on the GPU
machine, where PyTorch and its safetensors package are installed; the model runs on the CPU).

1. export  runs Ember's test "PyTorch interop" (tests/cpu/test_checkpoint.cpp) with
           EMBER_TORCH_INTEROP_PHASE=export: Ember writes ember_model.safetensors (a small
           ResNet-like model after a few training-mode batches) and ember_io.safetensors
           (an input and Ember's eval-mode output).
2. torch   loads ember_model.safetensors with safetensors.torch.load_file into the same model
           written in PyTorch (SmallResNet below, torchvision's BasicBlock names), strict, and
           compares PyTorch's eval-mode output with Ember's. Then trains the model a few SGD steps
           (weights and running statistics change), and saves its state_dict with
           safetensors.torch.save_file as torch_model.safetensors, plus torch_io.safetensors.
3. import  runs the Ember test with EMBER_TORCH_INTEROP_PHASE=import: Ember loads PyTorch's file
           and checks its own output against PyTorch's.

Writes the results as JSON (--out, default $OUT/checkpoint_torch.json or ./checkpoint_torch.json)
and exits non-zero unless every step passed.

  python3 scripts/check_checkpoint_torch.py --tests build-gpu/tests/ember_tests_cpu
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

TOLERANCE = 1e-4


def find_tests_binary(explicit):
    if explicit:
        return explicit
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    candidates = [os.environ.get("EMBER_BUILD_DIR", ""), os.path.join(root, "build-gpu"), os.path.join(root, "build")]
    for build in candidates:
        path = os.path.join(build, "tests", "ember_tests_cpu")
        if build and os.path.isfile(path):
            return path
    return None


def run_ember(binary, workdir, phase):
    env = dict(os.environ, EMBER_TORCH_INTEROP_DIR=workdir, EMBER_TORCH_INTEROP_PHASE=phase)
    proc = subprocess.run([binary, "--test-case=PyTorch interop*", "--no-intro=true"], env=env,
                          capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    # doctest exits 0 also when no case ran: require that exactly one did and passed.
    ran = "test cases: 1 | 1 passed" in re.sub(r"\s+", " ", output)
    result = {"rc": proc.returncode, "ok": proc.returncode == 0 and ran, "output_tail": output[-3000:]}
    for line in output.splitlines():
        if "ember_import_max_abs_diff=" in line:
            result["max_abs_diff"] = float(line.split("ember_import_max_abs_diff=")[1].split()[0])
    return result


def build_model(torch):
    nn = torch.nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            h = torch.relu(self.bn1(self.conv1(x)))
            identity = x if self.downsample is None else self.downsample(x)
            return torch.relu(self.bn2(self.conv2(h)) + identity)

    class SmallResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(8)
            self.layer1 = nn.Sequential(BasicBlock(8, 8, 1))
            self.layer2 = nn.Sequential(BasicBlock(8, 16, 2))
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            h = torch.relu(self.bn1(self.conv1(x)))
            h = self.layer2(self.layer1(h))
            return self.fc(h.mean(dim=(2, 3)))

    return SmallResNet()


def torch_side(workdir):
    import torch
    import safetensors
    from safetensors.torch import load_file, save_file

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    result = {"torch_version": torch.__version__, "safetensors_version": safetensors.__version__}
    state = load_file(os.path.join(workdir, "ember_model.safetensors"))
    io = load_file(os.path.join(workdir, "ember_io.safetensors"))
    model = build_model(torch)
    expected_names = list(model.state_dict().keys())
    result["names_match"] = sorted(state.keys()) == sorted(expected_names)
    result["dtypes"] = sorted({str(t.dtype) for t in state.values()})
    incompatible = model.load_state_dict(state, strict=True)
    result["missing_keys"] = list(incompatible.missing_keys)
    result["unexpected_keys"] = list(incompatible.unexpected_keys)
    model.eval()
    with torch.no_grad():
        out = model(io["input"])
    diff = (out - io["output"]).abs().max().item()
    result["load_max_abs_diff"] = diff
    result["load_ok"] = bool(result["names_match"] and diff < TOLERANCE)

    # Train a few steps so that weights, running statistics and num_batches_tracked all move.
    torch.manual_seed(7)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        x = torch.randn(4, 3, 12, 12)
        loss = torch.nn.functional.cross_entropy(model(x), torch.randint(0, 10, (4,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        y = model(x)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(workdir, "torch_model.safetensors"), metadata={"format": "pt"})
    save_file({"input": x, "output": y}, os.path.join(workdir, "torch_io.safetensors"))
    result["num_batches_tracked"] = int(model.bn1.num_batches_tracked)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", help="path of ember_tests_cpu (default: build-gpu/ or build/ under the repo)")
    parser.add_argument("--out", help="JSON result file")
    args = parser.parse_args()
    out_path = args.out or os.path.join(os.environ.get("OUT", "."), "checkpoint_torch.json")

    report = {"ok": False}
    binary = find_tests_binary(args.tests)
    if binary is None:
        report["error"] = "ember_tests_cpu not found: build the tests or pass --tests"
    else:
        report["tests_binary"] = binary
        with tempfile.TemporaryDirectory(prefix="ember_torch_ckpt_") as workdir:
            report["export"] = run_ember(binary, workdir, "export")
            if report["export"]["ok"]:
                try:
                    report["torch"] = torch_side(workdir)
                except Exception as e:  # reported in the JSON, not a traceback lost in a log
                    report["torch"] = {"error": f"{type(e).__name__}: {e}", "load_ok": False}
                if report["torch"].get("load_ok"):
                    report["import"] = run_ember(binary, workdir, "import")
            report["ok"] = bool(report["export"]["ok"] and report.get("torch", {}).get("load_ok")
                                and report.get("import", {}).get("ok"))
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(report, f, indent=2)
    summary = {k: v for k, v in report.items() if k != "export" and k != "import"}
    print(json.dumps(summary, indent=2))
    for step in ("export", "import"):
        if step in report:
            print(f"{step}: ok={report[step]['ok']} rc={report[step]['rc']}"
                  + (f" max_abs_diff={report[step]['max_abs_diff']}" if "max_abs_diff" in report[step] else ""))
    print(f"results written to {out_path}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
