# Whole training steps (issue 10), PyTorch side of bench/models.cpp: the same rows, bench/shape
# keys, synthetic batch, optimizer and timing, printed as the same JSON lines. PyTorch at its
# best in each row: cudnn.benchmark on; bf16 autocast and channels_last where Ember uses them;
# for the graphed rows a manually captured whole step (forward, backward, optimizer step; the
# recipe of PyTorch's CUDA-graphs notes: warm-up on a side stream, grads set to None before the
# capture, autocast with cache_enabled=False) replayed from static inputs; the fused optimizer
# kernels (SGD/Adam fused=True, capturable=True for graphed Adam), falling back to foreach where
# this PyTorch refuses them (the line's "optimizer" says which ran). The models are written out
# here (torchvision's ResNet-18/50 layout with examples/resnet's CIFAR stem option, and the char LM
# of examples/lstm) so that no torchvision is needed.
#
#   python3 bench/models.py [--rows cifar18_eager,charlm_eager] [--steps N] [--warmup N]
#                           [--device cpu] [--batch N]
#   torchrun --nproc_per_node N bench/models.py --rows resnet50_bf16   (data parallel, issue 11)
# --rows (or EMBER_BENCH_ROWS) picks rows; --device cpu with a small --batch smoke-tests the logic.
# cifar18_varying_res (issue 32; bench/models/varying.cpp is the Ember side) runs only when named:
# cifar18_eager's model, the input resolution drawn each step from 24..40 by the same LCG, over
# the same nearest-neighbour resampled batch, for --varying-steps (60) steps, once with
# cudnn.benchmark False and once with True (in that order, so the first fills no benchmark cache),
# each a fresh model; total_s is the loop's wall time, synchronized before and after.
# Under torchrun (WORLD_SIZE > 1, or --ddp) each rank trains on cuda:LOCAL_RANK wrapped in
# DistributedDataParallel (NCCL; buffers broadcast every step, PyTorch's default) at the row's
# batch per rank, on its slice of the world's synthetic batch as bench_models does; rank 0 prints
# the line with "world" and the throughput of all ranks, the shape key ending in " ddpN".
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = [
    # id, model, batch, bf16, channels_last, graphed
    ("resnet50_bf16", "resnet50", 256, True, True, False),
    ("resnet50_fp32", "resnet50", 256, False, False, False),
    ("cifar18_eager", "resnet18-cifar", 128, True, True, False),
    ("cifar18_graphed", "resnet18-cifar", 128, True, True, True),
    ("fmnist18_eager", "resnet18-fmnist", 256, True, True, False),
    ("fmnist18_graphed", "resnet18-fmnist", 256, True, True, True),
    ("charlm_eager", "charlm", 64, False, False, False),
    ("charlm_graphed", "charlm", 64, False, False, True),
]
VOCAB, EMBED, HIDDEN, LAYERS, SEQ_LEN = 256, 256, 512, 2, 128


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or cin != planes:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        return F.relu(self.bn2(self.conv2(out)) + identity, inplace=True)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = None
        if stride != 1 or cin != planes * 4:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes * 4, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = F.relu(self.bn2(self.conv2(out)), inplace=True)
        return F.relu(self.bn3(self.conv3(out)) + identity, inplace=True)


class ResNet(nn.Module):
    """torchvision's ResNet; stem "cifar" is examples/resnet's 3x3 stride-1 conv without max pool."""

    def __init__(self, arch, stem, in_channels, num_classes):
        super().__init__()
        block, blocks = {"resnet18": (BasicBlock, [2, 2, 2, 2]), "resnet50": (Bottleneck, [3, 4, 6, 3])}[arch]
        imagenet = stem == "imagenet"
        self.conv1 = nn.Conv2d(in_channels, 64, 7 if imagenet else 3, 2 if imagenet else 1, 3 if imagenet else 1,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1) if imagenet else nn.Identity()
        layers, cin = [], 64
        for i, planes in enumerate((64, 128, 256, 512)):
            seq = []
            for b in range(blocks[i]):
                seq.append(block(cin, planes, (1 if i == 0 else 2) if b == 0 else 1))
                cin = planes * block.expansion
            layers.append(nn.Sequential(*seq))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x)), inplace=True))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class CharLM(nn.Module):
    """examples/lstm's char LM: Embedding -> 2-layer LSTM (batch_first) -> Linear."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED)
        self.lstm = nn.LSTM(EMBED, HIDDEN, num_layers=LAYERS, batch_first=True)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens):
        return self.head(self.lstm(self.embed(tokens))[0]).reshape(-1, VOCAB)


def shape_key(model, batch, bf16, cl, graphed, world=0):
    name = {"resnet50": "resnet50 224x224x3", "resnet18-cifar": "resnet18-cifar 32x32x3",
            "resnet18-fmnist": "resnet18-cifar 28x28x1", "charlm": f"charlm T{SEQ_LEN}"}[model]
    key = f"{name} b{batch} {'bf16' if bf16 else 'f32'}{' cl' if cl else ''} {'graphed' if graphed else 'eager'}"
    return key + (f" ddp{world}" if world else "")


def synthetic_batch(model, batch, cl, dev, first=0):
    """The same inputs as bench/models.cpp (see its file comment); `first`: the batch's first
    sample in the world's batch (data parallel: rank * batch)."""
    if model == "charlm":
        width = SEQ_LEN + 1
        i = torch.arange(first * width, (first + batch) * width, dtype=torch.int64)
        block = ((37 * i + i // 5) % VOCAB).view(batch, width)
        return block[:, :SEQ_LEN].contiguous().to(dev), block[:, 1:].contiguous().to(dev)
    channels, size, classes = {"resnet50": (3, 224, 1000), "resnet18-cifar": (3, 32, 10),
                               "resnet18-fmnist": (1, 28, 10)}[model]
    per = channels * size * size
    i = torch.arange(first * per, (first + batch) * per, dtype=torch.float64)
    x = torch.sin(i * 0.001 + 0.5).view(batch, channels, size, size)
    x = x.float().to(dev)
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    y = ((7 * torch.arange(first, first + batch)) % classes).to(dev)
    return x, y


def make_optimizer(params, charlm, impl, graphed):
    kw = {} if impl == "default" else {impl: True}
    if charlm:
        if graphed:
            kw["capturable"] = True
        return torch.optim.Adam(params, lr=2e-3, **kw)
    return torch.optim.SGD(params, lr=0.02, momentum=0.9, weight_decay=5e-4, **kw)


def percentile(values, q):
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


def run_row(row, args, dev, impl, dist=None):
    rid, model_name, batch, bf16, cl, graphed = row
    if args.batch:
        batch = args.batch
    charlm = model_name == "charlm"
    cuda = dev.type == "cuda"
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist else (0, 1)
    torch.manual_seed(0)
    if charlm:
        model = CharLM()
    else:
        model = ResNet("resnet50" if model_name == "resnet50" else "resnet18",
                       "imagenet" if model_name == "resnet50" else "cifar",
                       1 if model_name == "resnet18-fmnist" else 3, 1000 if model_name == "resnet50" else 10)
    model = model.to(dev)
    if cl:
        model = model.to(memory_format=torch.channels_last)
    params = list(model.parameters())
    opt = make_optimizer(params, charlm, impl, graphed)
    x, y = synthetic_batch(model_name, batch, cl, dev, rank * batch)
    forward = model
    if dist:
        forward = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[dev.index] if cuda else None, gradient_as_bucket_view=True)

    def step(inp, target):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16, cache_enabled=not graphed):
            loss = F.cross_entropy(forward(inp).float(), target.reshape(-1) if charlm else target)
        loss.backward()
        if charlm:
            torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.detach()

    total = args.warmup + args.steps
    losses = torch.zeros(total, device=dev)
    if graphed:
        # Warm-up on a side stream (3 eager steps, as GraphedStep's default), then the capture;
        # the remaining warm-up steps are replays.
        static_x, static_y = x.clone(), y.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(3):
                opt.zero_grad(set_to_none=True)
                losses[i].copy_(step(static_x, static_y))
        torch.cuda.current_stream().wait_stream(side)
        opt.zero_grad(set_to_none=True)  # backward inside the capture allocates the grads in its pool
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = step(static_x, static_y)

        def run_step(i):
            static_x.copy_(x)
            static_y.copy_(y)
            graph.replay()
            losses[i].copy_(static_loss)
        first_replay = 3
    else:
        def run_step(i):
            opt.zero_grad(set_to_none=True)
            losses[i].copy_(step(x, y))
        first_replay = 0
    for i in range(first_replay, args.warmup):
        run_step(i)

    ms = []
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps + 1)]
        t0 = time.perf_counter()
        marks[0].record()
        profile_last = "EMBER_BENCH_PROFILE_STEP" in os.environ  # as bench_models: ncu's range
        for i in range(args.steps):
            profiled = profile_last and i == args.steps - 1
            if profiled:
                torch.cuda.profiler.start()
            run_step(args.warmup + i)
            marks[i + 1].record()
            if profiled:
                torch.cuda.profiler.stop()
        marks[-1].synchronize()
        wall = time.perf_counter() - t0
        ms = [marks[i].elapsed_time(marks[i + 1]) for i in range(args.steps)]
    else:
        t0 = time.perf_counter()
        for i in range(args.steps):
            a = time.perf_counter()
            run_step(args.warmup + i)
            ms.append((time.perf_counter() - a) * 1e3)
        wall = time.perf_counter() - t0

    l = losses.cpu().tolist()
    tail = max(1, total // 3)
    ok = all(math.isfinite(v) for v in l) and min(l[-tail:]) < l[0]
    median = percentile(ms, 0.5)
    items = batch * world * (SEQ_LEN if charlm else 1)
    r = {"bench": "train_step", "impl": "torch",
         "shape": shape_key(model_name, batch, bf16, cl, graphed, world if dist else 0),
         "row": rid, "batch": batch, "world": world,
         ("tokens_per_s" if charlm else "img_per_s"): round(items / (median / 1e3), 1),
         "ms": round(median, 4), "spread_ms": [round(percentile(ms, 0.1), 4), round(percentile(ms, 0.9), 4)],
         "min_ms": round(min(ms), 4), "max_ms": round(max(ms), 4), "wall_ms": round(wall * 1e3 / args.steps, 4),
         "steps": args.steps, "warmup": args.warmup}
    if cuda:
        r["peak_MiB"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        r["reserved_MiB"] = round(torch.cuda.memory_reserved() / 2**20, 1)
        r["before_MiB"] = round(before / 2**20, 1)
    r.update(optimizer=f"{'Adam' if charlm else 'SGD momentum'} {impl}", loss_first=l[0], loss_last=l[-1],
             correct=ok)
    return r


VARYING_ROW = "cifar18_varying_res"


def resolution_sequence(steps, lo=24, hi=40):
    # The LCG of bench/models/varying.cpp: x = x * 6364136223846793005 + 1442695040888963407 mod 2^64.
    x, seq = 2026, []
    for _ in range(steps):
        x = (x * 6364136223846793005 + 1442695040888963407) & ((1 << 64) - 1)
        seq.append(lo + (x >> 33) % (hi - lo + 1))
    return seq


def run_varying(args, dev, lo=24, hi=40):
    batch = args.batch or 128
    cuda = dev.type == "cuda"
    seq = resolution_sequence(args.varying_steps, lo, hi)
    per = 3 * hi * hi
    base = torch.sin(torch.arange(0, batch * per, dtype=torch.float64) * 0.001 + 0.5).view(batch, 3, hi, hi)
    base = base.float().to(dev)
    y = ((7 * torch.arange(0, batch)) % 10).to(dev)
    images = {}
    for r in range(lo, hi + 1):
        idx = torch.tensor([i * hi // r for i in range(r)], device=dev)
        images[r] = base.index_select(2, idx).index_select(3, idx).contiguous(memory_format=torch.channels_last)

    def make():
        torch.manual_seed(0)
        model = ResNet("resnet18", "cifar", 3, 10).to(dev).to(memory_format=torch.channels_last)
        opt = None
        for impl in ("fused", "foreach"):
            try:
                opt = make_optimizer(list(model.parameters()), False, impl, False)
                break
            except Exception:  # no fused SGD for this device
                continue
        return model, opt

    def step(model, opt, x):
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    # Kernels loaded and the allocator's first blocks made, outside the timed loops (as bench_models).
    torch.backends.cudnn.benchmark = False
    warm_model, warm_opt = make()
    for _ in range(2):
        step(warm_model, warm_opt, images[min(32, hi)])
    del warm_model, warm_opt
    ok_all, results = True, []
    for bench_flag in (False, True):
        torch.backends.cudnn.benchmark = bench_flag
        model, opt = make()
        losses = torch.zeros(len(seq), device=dev)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i, r in enumerate(seq):
            losses[i].copy_(step(model, opt, images[r]))
        if cuda:
            torch.cuda.synchronize()
        total = time.perf_counter() - t0
        l = losses.cpu().tolist()
        tail = max(1, len(l) // 3)
        ok = all(math.isfinite(v) for v in l) and min(l[-tail:]) < l[0]
        ok_all = ok_all and ok
        results.append({"bench": "train_step", "impl": "torch",
                        "shape": f"resnet18-cifar {lo}..{hi}x3 b{batch} bf16 cl varying", "row": VARYING_ROW,
                        "mode": f"cudnn_benchmark_{str(bench_flag).lower()}", "total_s": round(total, 4),
                        "steps": len(seq), "distinct_resolutions": len(set(seq)),
                        "optimizer": "SGD momentum", "loss_first": l[0], "loss_last": l[-1], "correct": ok})
    torch.backends.cudnn.benchmark = True
    return results, ok_all


def main():
    parser = argparse.ArgumentParser(description="PyTorch side of bench/models.cpp")
    parser.add_argument("--rows", default=os.environ.get("EMBER_BENCH_ROWS", ""))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch", type=int, default=0, help="override every row's batch (smoke tests)")
    parser.add_argument("--device", default="")
    parser.add_argument("--ddp", action="store_true", help="data parallel (automatic under torchrun with WORLD_SIZE > 1)")
    parser.add_argument("--varying-steps", type=int, default=60, help=f"steps of {VARYING_ROW}")
    args = parser.parse_args()
    if args.steps < 10 or args.warmup < 5:
        parser.error("--steps must be >= 10 and --warmup >= 5")
    ids = [r for r in args.rows.split(",") if r]
    varying = VARYING_ROW in ids
    ids = [r for r in ids if r != VARYING_ROW]
    known = {r[0]: r for r in ROWS}
    unknown = [r for r in ids if r not in known]
    if unknown:
        parser.error(f"unknown rows {unknown}; rows: {', '.join(known)}")
    rows = [known[r] for r in ids] or ([] if varying else ROWS)
    dist = None
    if args.ddp or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch.distributed as dist
    if not args.device:
        if not torch.cuda.is_available():
            print(json.dumps(dict(bench="train_step", skipped="no GPU (--device cpu runs a smoke test)")))
            return 0
        args.device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if dist else "cuda"
    dev = torch.device(args.device)
    if dist:
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    main_rank = not dist or dist.get_rank() == 0
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True         # PyTorch's default, stated: fp32 convs in TF32
    torch.backends.cuda.matmul.allow_tf32 = False  # PyTorch's default (Ember's too)
    all_ok = True
    if varying:
        if dist:
            parser.error(f"{VARYING_ROW} runs on one device")
        results, ok = run_varying(args, dev)
        all_ok = all_ok and ok
        for r in results:
            print(json.dumps(r), flush=True)
    for row in rows:
        if row[5] and (dev.type != "cuda" or dist):
            if main_rank:
                print(json.dumps(dict(bench="train_step", impl="torch", row=row[0], shape=shape_key(*row[1:]),
                                      skipped="graphs need a GPU" if not dist else "graphed DDP is not measured")))
            continue
        result, errors = None, []
        for impl in ("fused", "foreach", "default"):
            try:
                result = run_row(row, args, dev, impl, dist)
                break
            except Exception as e:  # e.g. no fused kernel for this device or no capture support
                errors.append(f"{impl}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                print(f"models.py: row {row[0]} with the {impl} optimizer failed: {errors[-1]}", file=sys.stderr)
            finally:
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
        if result is None:
            result = dict(bench="train_step", impl="torch", row=row[0], shape=shape_key(*row[1:]),
                          error="; ".join(errors))
            all_ok = False
        else:
            all_ok = all_ok and result["correct"]
        if main_rank:
            print(json.dumps(result), flush=True)
    if dist:
        dist.destroy_process_group()
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
