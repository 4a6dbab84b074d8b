# PyTorch side of bench/sort.cpp: the same rows, printed as the same JSON lines.
import json

import torch

from lib.timing import time_ms  # bench/lib/timing.py


def emit(bench, shape, ms, metric, value):
    print(json.dumps({"bench": bench, "impl": "torch", "shape": shape, "ms": ms, metric: value}),
          flush=True)


dev = "cuda"
torch.manual_seed(0)
n24 = 1 << 24

x = torch.randn(n24, device=dev)
ms = time_ms(lambda: torch.sort(x))
emit("sort", "2^24 f32", ms, "Gkeys_per_s", n24 / (ms * 1e6))
ms = time_ms(lambda: torch.topk(x, 100))
emit("topk", "2^24 f32, k 100", ms, "Gkeys_per_s", n24 / (ms * 1e6))
del x

rows, cols = 4096, 32768
x = torch.randn(rows, cols, device=dev)
ms = time_ms(lambda: torch.sort(x, -1))
emit("sort", "4096 x 32768 f32, last dim", ms, "Gkeys_per_s", rows * cols / (ms * 1e6))
ms = time_ms(lambda: torch.topk(x, 64, -1))
emit("topk", "4096 x 32768 f32, k 64, last dim", ms, "Gkeys_per_s", rows * cols / (ms * 1e6))
del x

n = 1 << 28
x = torch.randn(n, device=dev)
ms = time_ms(lambda: torch.cumsum(x, 0))
emit("cumsum", "2^28 f32", ms, "GBps", 2.0 * n * 4 / (ms * 1e6))
