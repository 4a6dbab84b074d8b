# PyTorch side of bench/rnn.cpp: torch.nn.LSTM (cuDNN) on the same cases, weights and inputs (the
# same functions of the element index), printed as the same JSON lines: lstm_fwd (training
# forward), lstm_fwdbwd (forward + output.backward(gy), with peak_MiB) in float32 (TF32 allowed,
# PyTorch's default for cuDNN) and bfloat16, and check sums that must agree with Ember's.
import json
import math
import time

import torch

from lib.timing import time_ms  # bench/lib/timing.py


def host_ms(f, iters=5):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        f()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e3 / iters


def index_signal(shape, scale, phase):
    n = math.prod(shape)
    i = torch.arange(n, dtype=torch.float64)
    return torch.sin(i * scale + phase).view(shape)


def mean_of_product(a, b):
    return (a.detach().double().cpu() * b.double().cpu()).mean().item()


def emit(bench, shape, ms, flops, host, **extra):
    print(json.dumps(dict(bench=bench, impl="torch", shape=shape, ms=ms, TFLOPs=round(flops / (ms * 1e9), 3),
                          host_ms=round(host, 4), **extra)), flush=True)


def bench_case(inp, hidden, layers, seq, batch, dtype):
    name = f"in{inp}_h{hidden}_L{layers}_T{seq}_B{batch} {'f32' if dtype == torch.float32 else 'bf16'}"
    lstm = torch.nn.LSTM(inp, hidden, num_layers=layers)
    bound = 1.0 / math.sqrt(hidden)
    with torch.no_grad():
        for i, p in enumerate(lstm._flat_weights):  # PyTorch's flat order, as Ember's
            p.copy_(index_signal(tuple(p.shape), 0.01 + 0.001 * i, 0.1 * (i + 1)) * bound)
    lstm = lstm.to("cuda", dtype)
    x64 = index_signal((seq, batch, inp), 0.003, 0.5)
    gy64 = index_signal((seq, batch, hidden), 0.007, 1.3)
    x, gy = x64.to("cuda", dtype), gy64.to("cuda", dtype)

    fwd_flops = sum(2.0 * seq * batch * 4 * hidden * ((inp if l == 0 else hidden) + hidden) for l in range(layers))
    out = {}

    def forward():
        out["y"] = lstm(x)[0]

    def step():
        lstm.zero_grad(set_to_none=True)
        y = lstm(x)[0]
        y.backward(gy)

    fwd_ms = time_ms(forward, iters=10)
    fwd_host = host_ms(forward)
    check_fwd = mean_of_product(out["y"], gy64)
    out.clear()
    step_ms = time_ms(step, iters=10)
    step_host = host_ms(step)
    torch.cuda.synchronize()
    lstm.zero_grad(set_to_none=True)
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak_mib = (torch.cuda.max_memory_allocated() - before) / 2**20
    g = lstm.weight_hh_l0.grad
    check_bwd = mean_of_product(g, index_signal(tuple(g.shape), 0.011, 0.2))
    emit("lstm_fwd", name, fwd_ms, fwd_flops, fwd_host, check=check_fwd)
    emit("lstm_fwdbwd", name, step_ms, 3 * fwd_flops, step_host, check=check_bwd, peak_MiB=round(peak_mib, 1))


def main():
    if not torch.cuda.is_available():
        print(json.dumps(dict(bench="lstm", skipped="no GPU")))
        return
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default, stated
    for case in ((512, 1024, 2, 100, 64), (128, 256, 1, 50, 32), (256, 512, 2, 128, 64)):
        for dtype in (torch.float32, torch.bfloat16):
            bench_case(*case, dtype)


if __name__ == "__main__":
    main()
