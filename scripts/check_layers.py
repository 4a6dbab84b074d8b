#!/usr/bin/env python3
"""Checks Ember's source tree for the rules of docs/architecture.md and prints the layer table.

1. Layers: every `#include "ember/..."` points to the including file's own layer or one below it
   (the table below, bottom first). The two backends are peers that never include each other.
2. CUDA op families: a file in cuda_kernels/<family>/ includes other families only through
   common/ or their face header cuda_kernels/<family>/<family>.h or .cuh.
3. Includes of Ember's own headers use the ember/ prefix (no bare "tensor/tensor.h").
4. Size: no source file over 800 lines unless scripts/long_files.txt names it with a reason.

Exits 1 on any violation. Usage: python3 scripts/check_layers.py [--table]
"""
import os
import re
import subprocess
import sys

# (layer, folders), bottom first. A file belongs to the layer of its longest matching folder.
LAYERS = [
    ("core", ["tensor/"]),
    ("runtime", ["tensor/runtime/"]),
    ("dispatch", ["dispatch/"]),
    ("kernel interface", ["kernel_interface/"]),
    ("backends", ["cpu_kernels/", "cuda_kernels/"]),
    ("autograd graph", ["autograd/graph/"]),
    ("ops", ["ops/"]),
    ("autograd engine", ["autograd/"]),
    ("nn", ["nn/"]),
    ("distributed", ["distributed/"]),
    ("umbrella header", ["ember.h"]),
    ("programs", ["examples/", "bench/", "tests/"]),
]
WHAT = {
    "core": "Tensor, Storage, DType, Device, Error, strides, the CPU allocator; no CUDA",
    "runtime": "CUDA caching allocator, streams, events, graphs, eager replay, generators",
    "dispatch": "kernel tables, algorithm registry, algorithm cache; knows no op or kernel",
    "kernel interface": "what kernels see: problem descriptors, parameter structs, tables",
    "backends": "cpu_kernels/ (Eigen) and cuda_kernels/<family>/: the kernels, registered",
    "autograd graph": "Node, SavedTensor, record_backward, grad mode: what ops record",
    "ops": "the public ops: checks, shapes, autograd formulas, then dispatch",
    "autograd engine": "backward(), grad(), gradcheck",
    "nn": "modules, losses, optimizers, schedules, AMP, checkpoints, data, GraphedStep",
    "distributed": "process groups (NCCL, MPI), DDP, SyncBatchNorm, ember-launch",
    "umbrella header": "ember.h: every public header",
    "programs": "examples, benchmarks, tests",
}
SOURCE_EXT = (".h", ".hpp", ".cpp", ".cu", ".cuh")
MAX_LINES = 800
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
BARE = re.compile(r"^(tensor|autograd|ops|dispatch|kernel_interface|cpu_kernels|cuda_kernels|nn|"
                  r"distributed)/")


def layer_of(path):
    best, best_len = None, -1
    for index, (_, folders) in enumerate(LAYERS):
        for folder in folders:
            if (path == folder or path.startswith(folder)) and len(folder) > best_len:
                best, best_len = index, len(folder)
    return best


def family_of(path):
    parts = path.split("/")
    return parts[1] if parts[0] == "cuda_kernels" and len(parts) > 2 else None


def print_table():
    print("layer table (bottom first; a file may include its own layer and the ones above in this "
          "list, never one below):")
    for index, (name, folders) in enumerate(LAYERS):
        print(f"  {index:2d}  {name:17s} {' '.join(folders):32s} {WHAT[name]}")


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    files = subprocess.check_output(["git", "ls-files"], text=True).split()
    files = [f for f in files if f.endswith(SOURCE_EXT) and os.path.exists(f)]
    allowed_long = {}
    allow_path = "scripts/long_files.txt"
    if os.path.exists(allow_path):
        for line in open(allow_path):
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, reason = line.partition(" ")
                allowed_long[name] = reason.strip()
    problems = []
    for f in files:
        text = open(f, encoding="utf-8", errors="replace").read()
        lines = text.count("\n")
        if lines > MAX_LINES and f not in allowed_long:
            problems.append(f"{f}: {lines} lines (over {MAX_LINES}); split it by concern or name it "
                            f"with a reason in {allow_path}")
        here = layer_of(f)
        if here is None:
            continue
        for match in INCLUDE.finditer(text):
            target = match.group(1)
            if BARE.match(target):
                problems.append(f"{f}: #include \"{target}\" lacks the ember/ prefix")
                continue
            if not target.startswith("ember/"):
                continue
            target = target[len("ember/"):]
            there = layer_of(target)
            if there is None:
                continue
            if there > here:
                problems.append(f"{f} ({LAYERS[here][0]}) includes {target} ({LAYERS[there][0]}), "
                                "a layer above it")
            elif there == here and LAYERS[here][0] == "backends" and \
                    f.split("/")[0] != target.split("/")[0]:
                problems.append(f"{f} includes {target}: the CPU and CUDA backends are peers")
            fam, target_fam = family_of(f), family_of(target)
            if fam and target_fam and fam != target_fam and target_fam != "common":
                base = os.path.basename(target)
                if base not in (target_fam + ".h", target_fam + ".cuh"):
                    problems.append(f"{f} reaches into family {target_fam}/ through {target}; "
                                    f"include its face header {target_fam}/{target_fam}.h instead")
    if "--table" in sys.argv or problems:
        print_table()
    for p in problems:
        print("check_layers:", p)
    print(f"check_layers: {len(files)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
