# PyTorch side of bench/norm.cpp: the same measurements on the same inputs (sin of the flat index),
# printed as the same JSON lines (bench, shape, ms, GBps over the same minimum bytes, and the same
# "check" checksum, which must agree with Ember's to a few digits).
import json
import torch
import torch.nn.functional as F

from lib.timing import time_ms  # bench/lib/timing.py


def emit(bench, shape, ms, nbytes, check):
    print(json.dumps(dict(bench=bench, impl="torch", shape=shape, ms=ms,
                          GBps=round(nbytes / (ms * 1e6), 1), check=check)), flush=True)


def index_signal(shape, scale, phase, dtype):
    n = 1
    for s in shape:
        n *= s
    i = torch.arange(n, dtype=torch.float64, device="cuda")
    return torch.sin(i * scale + phase).view(shape).to(dtype)


def mean_of_product(a, b):
    return (a.double() * b.double()).mean().item()


def validate_batch_norm(dtype):
    # PyTorch's BatchNorm2d against the formula in fp64, forward and backward.
    shape = (8, 64, 14, 14)
    x = index_signal(shape, 0.01, 0.3, dtype).contiguous(memory_format=torch.channels_last)
    gy = index_signal(shape, 0.003, 1.1, dtype)
    xg = x.detach().requires_grad_()
    y = F.batch_norm(xg, None, None, torch.ones(64, device="cuda", dtype=dtype),
                     torch.zeros(64, device="cuda", dtype=dtype), training=True)
    (dx,) = torch.autograd.grad(y, (xg,), gy)
    xr = x.detach().double().requires_grad_()
    mean = xr.mean(dim=(0, 2, 3), keepdim=True)
    var = xr.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
    yr = (xr - mean) / torch.sqrt(var + 1e-5)
    (dxr,) = torch.autograd.grad(yr, (xr,), gy.double())
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    ok = (y.double() - yr).abs().max().item() <= tol and (dx.double() - dxr).abs().max().item() <= 4 * tol
    if not ok:
        print(json.dumps(dict(bench="batch_norm_validate", impl="torch", error="mismatch vs fp64 formula")))
    return ok


def main():
    dev = "cuda"
    for dtype, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        if not validate_batch_norm(dtype):
            return
        for shape in ((256, 64, 56, 56), (128, 64, 32, 32)):
            name = f"{shape[0]}x64x{shape[2]}x{shape[3]} cl {tag}"
            nbytes = shape[0] * 64 * shape[2] * shape[3] * torch.tensor([], dtype=dtype).element_size()
            x = index_signal(shape, 0.01, 0.3, dtype).contiguous(memory_format=torch.channels_last)
            gy = index_signal(shape, 0.003, 1.1, dtype).contiguous(memory_format=torch.channels_last)
            bn = torch.nn.BatchNorm2d(64).to(dev, dtype).train()
            out = {}

            def fwd():
                out["y"] = bn(x)

            with torch.no_grad():
                ms = time_ms(fwd)
            emit("batch_norm_train_fwd", name, ms, 3 * nbytes, mean_of_product(out["y"], out["y"]))

            xg = x.detach().requires_grad_()

            def fwd_bwd():
                out["g"] = torch.autograd.grad(bn(xg), (xg, bn.weight, bn.bias), gy)

            ms = time_ms(fwd_bwd)
            emit("batch_norm_train_fwd_bwd", name, ms, 8 * nbytes, mean_of_product(out["g"][0], gy))
            del x, gy, xg, out

    for dtype, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        shape = (8192, 1024)
        name = f"8192x1024 {tag}"
        nbytes = 8192 * 1024 * torch.tensor([], dtype=dtype).element_size()
        x = index_signal(shape, 0.01, 0.3, dtype).requires_grad_()
        gy = index_signal(shape, 0.003, 1.1, dtype)
        ln = torch.nn.LayerNorm(1024).to(dev, dtype)
        out = {}

        def ln_fwd():
            out["y"] = ln(x)

        with torch.no_grad():
            ms = time_ms(ln_fwd)
        emit("layer_norm_fwd", name, ms, 2 * nbytes, mean_of_product(out["y"], out["y"]))

        def ln_fwd_bwd():
            out["g"] = torch.autograd.grad(ln(x), (x, ln.weight, ln.bias), gy)

        ms = time_ms(ln_fwd_bwd)
        emit("layer_norm_fwd_bwd", name, ms, 5 * nbytes, mean_of_product(out["g"][0], gy))

    print(json.dumps(dict(bench="versions", impl="torch", shape=torch.__version__, cuda=torch.version.cuda,
                          cudnn=str(torch.backends.cudnn.version()), gpu=torch.cuda.get_device_name())))


if __name__ == "__main__":
    main()
