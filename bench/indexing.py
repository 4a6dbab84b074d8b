# PyTorch side of bench/indexing.cpp: the same rows, printed as the same JSON lines.
import json

import torch

from lib.timing import time_ms  # bench/lib/timing.py


def emit(bench, shape, ms, elements):
    print(json.dumps(dict(bench=bench, impl="torch", shape=shape, ms=ms,
                          Gelem_per_s=elements / (ms * 1e6))), flush=True)


dev = "cuda"
torch.manual_seed(0)
n24, n26 = 1 << 24, 1 << 26

x = torch.randn(n24, device=dev)
idx = torch.randint(0, n24, (n24,), device=dev)
emit("index_int", "2^24 f32, 2^24 int64 index", time_ms(lambda: x[idx]), n24)

rows = torch.randn(1 << 20, 16, device=dev)
ridx = torch.randint(0, 1 << 20, (1 << 20,), device=dev)
emit("index_int", "[2^20, 16] f32, 2^20 int64 index", time_ms(lambda: rows[ridx]), n24)

mask = torch.rand(n24, device=dev) < 0.5
emit("index_mask", "2^24 f32, 2^24 bool mask (p 0.5)", time_ms(lambda: x[mask]), n24)

acc = torch.zeros(n24, device=dev)
v = torch.randn(n24, device=dev)
emit("index_put_accumulate", "2^24 f32 values into 2^24",
     time_ms(lambda: acc.index_put_((idx,), v, accumulate=True)), n24)
del x, idx, rows, ridx, mask, acc, v

mask26 = torch.rand(n26, device=dev) < 0.5
emit("nonzero", "2^26 bool (p 0.5)", time_ms(lambda: mask26.nonzero()), n26)
x26 = torch.randn(n26, device=dev)
emit("masked_select", "2^26 f32, bool mask (p 0.5)", time_ms(lambda: x26.masked_select(mask26)), n26)
