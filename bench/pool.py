# PyTorch side of bench/pool.cpp: the pooling layers of ResNet-50 at batch 256, channels_last
# (3x3 stride-2 max pool, 2x2 average pool, global average pool; a 3x3 stride-2 average pool),
# forward and forward+backward with dy = y, fp32 and bf16, on the same inputs (4 sin(0.001 i) over
# the NCHW flat index), printed as the same JSON lines with the same checksums and byte counts.
import json

import torch
import torch.nn.functional as F

from lib.timing import time_ms  # bench/lib/timing.py

dev = "cuda"


def emit(bench, shape, ms, nbytes, checksum, **extra):
    print(json.dumps(dict(bench=bench, impl="torch", shape=shape, ms=ms,
                          GBps=nbytes / (ms * 1e6), checksum=checksum, **extra)), flush=True)


def deterministic_input(shape, dtype):
    n = 1
    for s in shape:
        n *= s
    i = torch.arange(n, device=dev, dtype=torch.float64)
    x = (torch.sin(i * 0.001) * 4.0).to(dtype).reshape(shape)
    return x.contiguous(memory_format=torch.channels_last)


def bench_pool(name, shape, dtype, pool):
    shape_name = "x".join(str(s) for s in shape) + " cl " + ("f32" if dtype == torch.float32 else "bf16")
    es = torch.finfo(dtype).bits // 8
    x = deterministic_input(shape, dtype)
    with torch.no_grad():
        y = pool(x)
        ms = time_ms(lambda: pool(x))
    emit(name, shape_name, ms, (x.numel() + y.numel()) * es, y.double().mean().item())
    xg = x.detach().requires_grad_(True)

    def fwd_bwd():
        yg = pool(xg)
        return torch.autograd.grad(yg, xg, yg.detach())[0]

    dx = fwd_bwd()
    ms = time_ms(fwd_bwd)
    # What any correct backward's checksum is (bench/pool.cpp): sum(y * y) / |x|.
    expect = (y.double() * y.double()).sum().item() / x.numel()
    emit(name + "_fwd_bwd", shape_name, ms, 2 * (x.numel() + y.numel()) * es,
         (dx.double() * x.double()).mean().item(), expect=expect)


if not torch.cuda.is_available():
    print(json.dumps({"bench": "pool", "skipped": "no GPU"}))
else:
    torch.backends.cudnn.benchmark = True
    for dtype in (torch.float32, torch.bfloat16):
        bench_pool("max_pool2d_3x3s2", (256, 64, 112, 112), dtype,
                   lambda t: F.max_pool2d(t, 3, 2, 1))
        bench_pool("avg_pool2d_2x2s2", (256, 256, 56, 56), dtype, lambda t: F.avg_pool2d(t, 2, 2))
        bench_pool("avg_pool2d_3x3s2", (256, 64, 112, 112), dtype,
                   lambda t: F.avg_pool2d(t, 3, 2, 1))
        bench_pool("global_avg_pool", (256, 2048, 7, 7), dtype,
                   lambda t: F.adaptive_avg_pool2d(t, (1, 1)))
    print(json.dumps(dict(bench="versions", impl="torch", shape=torch.__version__,
                          cuda=torch.version.cuda, cudnn=str(torch.backends.cudnn.version()),
                          gpu=torch.cuda.get_device_name())), flush=True)
