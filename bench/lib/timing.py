"""Timing shared by the PyTorch sides of the benchmarks (bench/*.py, which import it as
lib.timing: Python puts the script's folder first on sys.path): the median over `reps`
repetitions of the mean time of `iters` back-to-back calls, from CUDA events on the current
stream, after 3 warm-up calls. The same procedure as bench/timing.h on Ember's side."""
import torch


def time_ms(f, iters=20, reps=5):
    for _ in range(3):
        f()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            f()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / iters)
    ts.sort()
    return ts[len(ts) // 2]
