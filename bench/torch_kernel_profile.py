"""Per-kernel device time of PyTorch's Coppelius step, for comparing kernel families with
Alpha's profile: runs `coppelius_torch.py bench` with its flash-attention check replaced by a
torch.profiler capture of three steps, and prints each kernel's mean time a step.

    python3 bench/torch_kernel_profile.py --batch 16 --settings compile+graph --graph-compile-mode default
"""
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coppelius_torch as ct  # noqa: E402

STEPS = 3


def kernel_table(run_once):
    import torch
    from torch.profiler import ProfilerActivity, profile

    run_once()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            run_once()
        torch.cuda.synchronize()
    agg = collections.defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        t = getattr(e, "device_time", None)
        if t is None:
            t = getattr(e, "cuda_time", 0.0)
        if not t:
            continue
        agg[e.name][0] += t
        agg[e.name][1] += 1
    rows = sorted(agg.items(), key=lambda kv: -kv[1][0])
    total = sum(v[0] for v in agg.values()) / STEPS / 1e3
    print(f"kernel sum {total:.3f} ms a step, {sum(v[1] for v in agg.values()) // STEPS} launches", file=sys.stderr)
    for name, (us, n) in rows[:70]:
        print(f"{us / STEPS / 1e3:9.3f} ms {n // STEPS:5d}x  {name[:150]}", file=sys.stderr)
    return [f"kernel sum {total:.3f} ms"]


ct.attention_kernels = kernel_table
ct.flash_check = lambda cfg, device, build=None: {}
sys.exit(ct.main(["bench", *sys.argv[1:], "--repeats", "1"]))
