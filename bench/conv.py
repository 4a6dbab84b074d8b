# PyTorch side of bench/conv.cpp: the nine ResNet-50 layer shapes at batch 64 in bf16 channels_last
# and fp32 NCHW (TF32 allowed, the default), then the CIFAR-stem ResNet-18's convolutions at batch
# 128 in bf16 channels_last (EMBER_BENCH_CONV_LAYERS=resnet50 or cifar18: one set only;
# EMBER_BENCH_CONV_SHAPE=<text>: the layers whose shape key contains it); forward /
# backward-data / backward-filter,
# cudnn.benchmark on, each cuDNN call timed as a replayed CUDA graph so Python overhead is
# excluded. Same JSON keys and the same input formula (sin(0.37 * i + phase)) as the Ember side;
# workspace_bytes is the peak memory a call allocates beyond its result.
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

RESNET50_LAYERS = [  # N, C, H, W, K, R, stride; padding R // 2
    (64, 64, 56, 56, 64, 1, 1), (64, 64, 56, 56, 64, 3, 1), (64, 64, 56, 56, 256, 1, 1),
    (64, 128, 28, 28, 128, 3, 1), (64, 256, 14, 14, 256, 3, 1), (64, 512, 7, 7, 512, 3, 1),
    (64, 1024, 14, 14, 256, 1, 1), (64, 3, 224, 224, 64, 7, 2), (64, 256, 56, 56, 512, 1, 2),
]
CIFAR18_LAYERS = [
    (128, 3, 32, 32, 64, 3, 1), (128, 64, 32, 32, 64, 3, 1), (128, 64, 32, 32, 128, 3, 2),
    (128, 128, 16, 16, 128, 3, 1), (128, 64, 32, 32, 128, 1, 2), (128, 128, 16, 16, 256, 3, 2),
    (128, 256, 8, 8, 256, 3, 1), (128, 128, 16, 16, 256, 1, 2), (128, 256, 8, 8, 512, 3, 2),
    (128, 512, 4, 4, 512, 3, 1), (128, 256, 8, 8, 512, 1, 2),
]
CONFIGS = [("bf16-nhwc", torch.bfloat16, True), ("fp32-nchw", torch.float32, False)]
dev = "cuda"


def emit(**kw):
    print(json.dumps(kw), flush=True)


def pattern(shape, phase, scale, dtype, channels_last):
    i = torch.arange(math.prod(shape), device=dev, dtype=torch.float32).view(shape)
    t = (torch.sin(i * 0.37 + phase) * scale).to(dtype)
    return t.contiguous(memory_format=torch.channels_last) if channels_last else t.contiguous()


def graph_time_ms(f, iters=20, reps=5):
    # Warm up on a side stream (cudnn.benchmark chooses its algorithm on the first calls), then
    # capture one call and time replays.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = f()
    g.replay()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / iters)
    ts.sort()
    return ts[len(ts) // 2], out


def workspace_bytes(f):
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = f()
    torch.cuda.synchronize()
    return max(0, torch.cuda.max_memory_allocated() - base - out.numel() * out.element_size())


def main():
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True
    only = os.environ.get("EMBER_BENCH_CONV_LAYERS", "")
    if only not in ("", "resnet50", "cifar18"):
        sys.exit(f"EMBER_BENCH_CONV_LAYERS must be resnet50 or cifar18 (or unset: both), got '{only}'")
    runs = []
    if only != "cifar18":
        runs += [(config, layer) for config in CONFIGS for layer in RESNET50_LAYERS]
    if only != "resnet50":
        runs += [(CONFIGS[0], layer) for layer in CIFAR18_LAYERS]
    only_shape = os.environ.get("EMBER_BENCH_CONV_SHAPE", "")
    for (name, dtype, channels_last), (n, c, h, w, k, r, stride) in runs:
        pad = r // 2
        p = (h + 2 * pad - r) // stride + 1
        q = (w + 2 * pad - r) // stride + 1
        if only_shape not in f"{n}x{c}x{h}x{w} k{k} {r}x{r} s{stride} {name}":
            continue
        flops = 2.0 * n * k * p * q * c * r * r
        x = pattern((n, c, h, w), 0.0, 1.0, dtype, channels_last)
        wt = pattern((k, c, r, r), 1.0, 0.1, dtype, channels_last)
        dy = pattern((n, k, p, q), 2.0, 1.0, dtype, channels_last)
        shape = f"{n}x{c}x{h}x{w} k{k} {r}x{r} s{stride} {name}"

        def backward(mask, index):
            return lambda: torch.ops.aten.convolution_backward(
                dy, x, wt, None, [stride, stride], [pad, pad], [1, 1], False, [0, 0], 1, mask)[index]

        calls = [
            ("conv2d_fwd", lambda: F.conv2d(x, wt, None, stride, pad)),
            ("conv2d_bwd_data", backward([True, False, False], 0)),
            ("conv2d_bwd_filter", backward([False, True, False], 1)),
        ]
        for bench, f in calls:
            ms, out = graph_time_ms(f)
            emit(bench=bench, impl="torch", shape=shape, ms=ms, TFLOPs=flops / (ms * 1e9),
                 workspace_bytes=workspace_bytes(f), checksum=out.double().mean().item())
    emit(bench="versions", impl="torch", shape=torch.__version__, cuda=torch.version.cuda,
         cudnn=str(torch.backends.cudnn.version()), gpu=torch.cuda.get_device_name())


if __name__ == "__main__":
    main()
