# PyTorch side of bench/foundation.cpp: the same measurements, printed as the same JSON lines.
import json, time, torch

from lib.timing import time_ms  # bench/lib/timing.py

def emit(**kw):
    print(json.dumps(kw), flush=True)

dev = "cuda"
torch.manual_seed(0)
# device-to-device copy: the bandwidth ceiling
n = 1 << 28
src = torch.randn(n, device=dev)
dst = torch.empty_like(src)
ms = time_ms(lambda: dst.copy_(src))
emit(bench="copy", impl="torch", shape="2^28 f32", ms=ms, GBps=2 * n * 4 / (ms * 1e6))
for dt, name in ((torch.float32, "2^28 f32"), (torch.bfloat16, "2^28 bf16")):
    a = torch.randn(n, device=dev, dtype=dt)
    b = torch.randn(n, device=dev, dtype=dt)
    ms = time_ms(lambda: a + b)
    emit(bench="add", impl="torch", shape=name, ms=ms, GBps=3 * n * a.element_size() / (ms * 1e6))
    del a, b

for m, nn, k, dt, tf32, name in ((8192, 8192, 8192, torch.bfloat16, False, "8192^3 bf16"),
                                 (4096, 4096, 4096, torch.bfloat16, False, "4096^3 bf16"),
                                 (8192, 8192, 8192, torch.float32, True, "8192^3 tf32"),
                                 (4096, 4096, 4096, torch.float32, False, "4096^3 fp32"),
                                 (1024, 1024, 1024, torch.bfloat16, False, "1024^3 bf16")):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(m, k, device=dev, dtype=dt)
    b = torch.randn(k, nn, device=dev, dtype=dt)
    ms = time_ms(lambda: torch.matmul(a, b), iters=5 if m >= 8192 else 20)
    emit(bench="matmul", impl="torch", shape=name, ms=ms, TFLOPs=2 * m * nn * k / (ms * 1e9))
torch.backends.cuda.matmul.allow_tf32 = False

# Host cost of one tiny op, timed in bursts shorter than the launch queue with the stream drained
# between bursts (as bench/foundation.cpp; the back-to-back figure is bound by the GPU retiring
# tiny kernels once the queue is full).
x = torch.zeros(1, device=dev)
for _ in range(1000):
    x.add_(1.0)
torch.cuda.synchronize()
BURST, BURSTS = 256, 200


def burst_us(op):
    total = 0.0
    for _ in range(BURSTS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(BURST):
            op()
        total += time.perf_counter() - t0
    torch.cuda.synchronize()
    return total / (BURST * BURSTS) * 1e6


emit(bench="tiny_op_host", impl="torch", shape="add_ 1 elem", us_per_op=burst_us(lambda: x.add_(1.0)))
y = torch.zeros(1, device=dev)
emit(bench="tiny_op_host", impl="torch", shape="y + 1 (allocates)", us_per_op=burst_us(lambda: y + 1.0))
N = 100000
t0 = time.perf_counter()
for _ in range(N):
    x.add_(1.0)
t1 = time.perf_counter()
torch.cuda.synchronize()
emit(bench="tiny_op_host", impl="torch", shape="add_ 1 elem, 100k back to back", us_per_op=(t1 - t0) / N * 1e6)
emit(bench="versions", impl="torch", shape=torch.__version__, cuda=torch.version.cuda,
     cudnn=str(torch.backends.cudnn.version()), gpu=torch.cuda.get_device_name())
