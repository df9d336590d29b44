#!/usr/bin/env python3
"""
bench_cpu_adam_torch.py: torch's CPU AdamW on the sizes of test/bench/bench_cpu_adam.c, for comparison
in the same session:

    OMP_NUM_THREADS=16 build/bench/bench_cpu_adam 100 1000 3000
    OMP_NUM_THREADS=16 python3 scripts/bench_cpu_adam_torch.py 100 1000 3000

Variants (one fp32 parameter tensor of N elements, fp32 gradient, as DeepSpeed's offload sub-groups):
  foreach  torch.optim.AdamW(foreach=True)     multi-tensor path (one tensor here)
  fused    torch.optim.AdamW(fused=True)       fused CPU kernel (torch >= 2.4)
  single   torch.optim.AdamW(foreach=False)    per-op reference path
  fused_offload_bf16 / fused_offload_fp16
           what one mixed-precision offload step costs with torch's fused kernel: the 16-bit gradient
           from the GPU converted into the fp32 grad (g32.copy_(g16): 2 B read + 4 B written), the fused
           step (28 B), then the 16-bit working copy refreshed from the fp32 master (p16.copy_(p):
           4 B read + 2 B written): 40 B/param in three passes, against t5train's single 28 B pass
           (bench_cpu_adam's "bf16 grad + bf16 copy" rows).
Logical traffic is 28 B/parameter as in the C benchmark (read p, m, v, g; write p, m, v); torch's
non-fused paths make several passes, so their real traffic is higher. Prints s/step, params/s and
the 28 B/param "effective" GB/s. Needs torch (CPU build is enough).
"""
import argparse
import time

import torch


def bench(n, variant, steps, wd):
    p = torch.nn.Parameter(torch.empty(n, dtype=torch.float32).uniform_(-0.5, 0.5))
    p.grad = torch.empty(n, dtype=torch.float32).uniform_(-3e-3, 3e-3)
    offload = variant.startswith("fused_offload_")
    kw = ({"foreach": True} if variant == "foreach" else {"fused": True} if variant == "fused" or offload
          else {"foreach": False})
    opt = torch.optim.AdamW([p], lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd, **kw)
    if offload:
        half = torch.bfloat16 if variant.endswith("bf16") else torch.float16
        g16 = p.grad.to(half)
        p16 = torch.empty(n, dtype=half)

    def step():
        if offload:
            p.grad.copy_(g16)
        opt.step()
        if offload:
            p16.copy_(p.detach())

    step()  # warm-up: allocates exp_avg / exp_avg_sq
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    dt = (time.perf_counter() - t0) / steps
    del opt, p
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sizes", nargs="*", type=float, default=[10, 100], help="parameters, in millions")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--variants", default="foreach,fused,single")
    a = ap.parse_args()
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, {a.steps} timed steps after 1 warm-up")
    print(f"{'params':>9} {'variant':<26} {'s/step':>10} {'params/s':>14} {'GB/s':>10}")
    for size in a.sizes:
        n = int(size * 1e6)
        for v in a.variants.split(","):
            try:
                dt = bench(n, v, a.steps, a.weight_decay)
            except (RuntimeError, TypeError) as e:  # e.g. fused=True unsupported on this torch/CPU
                print(f"{size:7.0f}M  torch AdamW {v:<14} unavailable: {str(e).splitlines()[0]}")
                continue
            nbytes = 40.0 if v.startswith("fused_offload_") else 28.0
            print(f"{size:7.0f}M  {'torch AdamW ' + v:<26} {dt:10.4f} {n / dt:14.4g} {nbytes * n / dt / 1e9:10.2f}")


if __name__ == "__main__":
    main()
