# PyTorch side of bench/softmax.cpp: the same measurements on the same deterministic inputs
# (x = 4 sin(0.001 i) computed in fp64, targets (7919 r) mod C), printed as the same JSON lines
# with the same checksums, so a mismatch shows before any time is compared.
import json, torch
import torch.nn.functional as F

from lib.timing import time_ms  # bench/lib/timing.py

dev = "cuda"


def emit(bench, shape, ms, nbytes, checksum):
    print(json.dumps(dict(bench=bench, impl="torch", shape=shape, ms=ms,
                          GBps=nbytes / (ms * 1e6), checksum=checksum)), flush=True)

def deterministic_input(rows, cols, dtype):
    i = torch.arange(rows * cols, device=dev, dtype=torch.float64)
    return (torch.sin(i * 0.001) * 4.0).to(dtype).reshape(rows, cols)

def shape_name(rows, cols, dtype):
    return f"{rows}x{cols} {'f32' if dtype == torch.float32 else 'bf16'}"

def checksum(y, x):
    return ((y.float() * x.float()).sum() / x.shape[0]).item()

def bench_softmax(rows, cols, dtype):
    shape, n, es = shape_name(rows, cols, dtype), rows * cols, torch.finfo(dtype).bits // 8
    x = deterministic_input(rows, cols, dtype)
    y = torch.softmax(x, -1)
    emit("softmax", shape, time_ms(lambda: torch.softmax(x, -1)), 2 * n * es, checksum(y, x))
    ly = torch.log_softmax(x, -1)
    emit("log_softmax", shape, time_ms(lambda: torch.log_softmax(x, -1)), 2 * n * es, checksum(ly, x))
    xg = x.detach().requires_grad_(True)
    yg = torch.softmax(xg, -1)
    dx = torch.autograd.grad(yg, xg, x, retain_graph=True)[0]
    emit("softmax_backward", shape,
         time_ms(lambda: torch.autograd.grad(yg, xg, x, retain_graph=True)), 3 * n * es,
         checksum(dx, x))

def bench_cross_entropy(rows, cols, dtype):
    shape, n, es = shape_name(rows, cols, dtype), rows * cols, torch.finfo(dtype).bits // 8
    x = deterministic_input(rows, cols, dtype).requires_grad_(True)
    t = (torch.arange(rows, device=dev, dtype=torch.int64) * 7919) % cols
    loss = F.cross_entropy(x, t)
    emit("cross_entropy_fwd", shape, time_ms(lambda: F.cross_entropy(x, t)), n * es, loss.item())
    def fwd_bwd():
        return torch.autograd.grad(F.cross_entropy(x, t), x)[0]
    dx = fwd_bwd()
    emit("cross_entropy_fwd_bwd", shape, time_ms(fwd_bwd), 3 * n * es,
         checksum(dx, x.detach()) * 1e6)

def bench_activations(dtype):
    n = 1 << 28
    shape, es = f"2^28 {'f32' if dtype == torch.float32 else 'bf16'}", torch.finfo(dtype).bits // 8
    x = deterministic_input(8192, n // 8192, dtype).reshape(n)
    emit("gelu", shape, time_ms(lambda: F.gelu(x)), 2 * n * es,
         checksum(F.gelu(x).reshape(1, n), x.reshape(1, n)))
    emit("silu", shape, time_ms(lambda: F.silu(x)), 2 * n * es,
         checksum(F.silu(x).reshape(1, n), x.reshape(1, n)))
    # dL/dy = gelu(x), a tensor of its own (as in bench/softmax.cpp): with dL/dy = x both reads hit
    # the same lines and the byte count overstates the traffic.
    xg = x.detach().requires_grad_(True)
    yg = F.gelu(xg)
    dy = F.gelu(x)
    dx = torch.autograd.grad(yg, xg, dy, retain_graph=True)[0]
    emit("gelu_backward", shape, time_ms(lambda: torch.autograd.grad(yg, xg, dy, retain_graph=True)),
         3 * n * es, checksum(dx.reshape(1, n), x.reshape(1, n)))

def bench_dropout(dtype):
    # As bench/softmax.cpp: p = 0.1; checksum sum(y x) / sum(x x), 1 within sampling noise.
    n = 1 << 28
    shape, es = f"2^28 {'f32' if dtype == torch.float32 else 'bf16'}", torch.finfo(dtype).bits // 8
    x = deterministic_input(8192, n // 8192, dtype).reshape(n)
    x64 = x.double()

    def ratio(y):
        return ((y.double() * x64).sum() / (x64 * x64).sum()).item()

    emit("dropout", shape, time_ms(lambda: F.dropout(x, 0.1, True)), (2 * es + 1) * n,
         ratio(F.dropout(x, 0.1, True)))
    xg = x.detach().requires_grad_(True)
    dy = x * 0.5
    emit("dropout_fwd_bwd", shape,
         time_ms(lambda: torch.autograd.grad(F.dropout(xg, 0.1, True), xg, dy)),
         (4 * es + 2) * n, 2 * ratio(torch.autograd.grad(F.dropout(xg, 0.1, True), xg, dy)[0]))

for dt in (torch.float32, torch.bfloat16):
    bench_softmax(8192, 32768, dt)
for dt in (torch.float32, torch.bfloat16):
    bench_cross_entropy(8192, 32768, dt)
for dt in (torch.float32, torch.bfloat16):
    bench_softmax(65536, 1024, dt)
for dt in (torch.float32, torch.bfloat16):
    bench_activations(dt)
for dt in (torch.float32, torch.bfloat16):
    bench_dropout(dt)
