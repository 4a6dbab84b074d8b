# PyTorch side of bench/attention.cpp: scaled_dot_product_attention forward and forward + backward
# in bf16 with the cuDNN and the flash backends, on the same deterministic inputs (q = sin(0.001 i),
# k = cos(0.0013 i), v = sin(0.0007 i + 1), dO = cos(0.0011 i), computed in fp64), printed as the
# same JSON lines (impl torch_cudnn / torch_flash) with the same checksums (the mean of the
# output, or the sum of the three gradients' means).
import json, math, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from lib.timing import time_ms  # bench/lib/timing.py

dev = "cuda"


def emit(bench, impl, shape, ms, flops, checksum):
    print(json.dumps(dict(bench=bench, impl=impl, shape=shape, ms=ms, TFLOPs=flops / (ms * 1e9),
                          checksum=checksum)), flush=True)


def deterministic(b, h, t, d, a, c, use_cos):
    i = torch.arange(b * h * t * d, device=dev, dtype=torch.float64) * a + c
    return (torch.cos(i) if use_cos else torch.sin(i)).to(torch.bfloat16).reshape(b, h, t, d)


def mean_of(x):
    return (x.float().sum() / x.numel()).item()


def bench_attention(b, h, t, d, causal):
    shape = f"B{b} H{h} T{t} D{d}{' causal' if causal else ''} bf16"
    fwd_flops = 4.0 * b * h * t * t * d * (0.5 if causal else 1.0)
    q = deterministic(b, h, t, d, 0.001, 0, False)
    k = deterministic(b, h, t, d, 0.0013, 0, True)
    v = deterministic(b, h, t, d, 0.0007, 1, False)
    do = deterministic(b, h, t, d, 0.0011, 0, True)
    scale = 1.0 / math.sqrt(d)
    for impl, backend in (("torch_cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("torch_flash", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                def fwd():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
                out = fwd()
                emit("attention_fwd", impl, shape, time_ms(fwd), fwd_flops, mean_of(out))
                qg, kg, vg = (x.detach().requires_grad_(True) for x in (q, k, v))

                def fwd_bwd():
                    o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, scale=scale)
                    return torch.autograd.grad(o, (qg, kg, vg), do)
                grads = fwd_bwd()
                emit("attention_fwd_bwd", impl, shape, time_ms(fwd_bwd), 3.5 * fwd_flops,
                     sum(mean_of(g) for g in grads))
        except RuntimeError as e:  # a backend that does not take the shape
            print(json.dumps(dict(bench="attention", impl=impl, shape=shape,
                                  skipped=str(e).splitlines()[0])), flush=True)


if __name__ == "__main__":
    for b, h, t, d in ((16, 16, 1024, 64), (8, 16, 2048, 128), (4, 16, 4096, 128),
                       (64, 12, 256, 64)):
        for causal in (False, True):
            bench_attention(b, h, t, d, causal)
