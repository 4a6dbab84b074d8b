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

del mask26, x26
bag_rows, bags = 1 << 20, 1 << 14
w = torch.randn(bag_rows, 64, device=dev)
bidx = torch.randint(0, bag_rows, (bag_rows,), device=dev)
offsets = torch.arange(0, bag_rows, 64, device=dev)
emit("embedding_bag", "[2^20, 64] f32, 2^14 bags of 64, sum",
     time_ms(lambda: torch.nn.functional.embedding_bag(bidx, w, offsets, mode="sum")), bag_rows * 64)
w.requires_grad_(True)
g = torch.randn(bags, 64, device=dev)


def bag_train():
    w.grad = None
    torch.nn.functional.embedding_bag(bidx, w, offsets, mode="sum").backward(g)


emit("embedding_bag_fwd_bwd", "[2^20, 64] f32, 2^14 bags of 64, sum", time_ms(bag_train), bag_rows * 64)

logits = torch.randn(200, 32, 30, device=dev, requires_grad=True)
targets = torch.randint(1, 30, (32, 40), device=dev)
lengths_in, lengths_tg = [200] * 32, [40] * 32


def ctc_train():
    logits.grad = None
    torch.nn.functional.ctc_loss(logits.log_softmax(2), targets, lengths_in, lengths_tg).backward()


emit("ctc_loss_fwd_bwd", "T 200, N 32, C 30, S 40 f32", time_ms(ctc_train), 200 * 32 * 30)
