# PyTorch side of bench/optim.cpp: fused AdamW / SGD-momentum steps (torch.optim, fused=True) and
# clip_grad_norm_ on the same deterministic parameters and gradients, printed as the same JSON
# lines with the same checksums (sum of all parameters after three steps, or the norm).
import json
import torch

from lib.timing import time_ms  # bench/lib/timing.py

dev = "cuda"


def emit(bench, shape, ms, nbytes, checksum):
    print(json.dumps(dict(bench=bench, impl="torch", shape=shape, ms=ms,
                          GBps=nbytes / (ms * 1e6), checksum=checksum)), flush=True)

def resnet50_sizes():
    s = [64 * 3 * 7 * 7, 64, 64]
    inp = 64
    for w, blocks in zip([64, 128, 256, 512], [3, 4, 6, 3]):
        out = 4 * w
        for b in range(blocks):
            s += [inp * w, w, w, w * w * 9, w, w, w * out, out, out]
            if b == 0:
                s += [inp * out, out, out]
            inp = out
    return s + [1000 * 2048, 1000]

def many_small_sizes():
    return [1000 + (k * 7919) % 1000 for k in range(2000)]

def make_params(sizes):
    params = []
    for k, n in enumerate(sizes):
        i = torch.arange(n, device=dev, dtype=torch.float64) + k
        p = torch.sin(i * 0.001).float().requires_grad_(True)
        p.grad = (torch.cos(i * 0.002) * 0.01).float()
        params.append(p)
    return params

def sum_all(params):
    return sum(p.detach().double().sum() for p in params).item()

def bench_optimizer(bench, make, bytes_per_param, shape, sizes):
    params = make_params(sizes)
    opt = make(params)
    for _ in range(3):
        opt.step()
    checksum = sum_all(params)
    emit(bench, shape, time_ms(opt.step), bytes_per_param * sum(sizes), checksum)

def bench_clip(shape, sizes):
    params = make_params(sizes)
    checksum = torch.nn.utils.clip_grad_norm_(params, 1e9).item()
    emit("clip_grad_norm", shape, time_ms(lambda: torch.nn.utils.clip_grad_norm_(params, 1e9)),
         12 * sum(sizes), checksum)

adamw = lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=1e-2, fused=True)
sgd = lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-4, fused=True)
for shape, sizes in [("resnet50 f32", resnet50_sizes()), ("2000 small f32", many_small_sizes())]:
    bench_optimizer("adamw_step", adamw, 28, shape, sizes)
    bench_optimizer("sgd_momentum_step", sgd, 20, shape, sizes)
    bench_clip(shape, sizes)
