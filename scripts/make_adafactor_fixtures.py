#!/usr/bin/env python3
"""
make_adafactor_fixtures.py: reference trajectories of transformers' Adafactor for test/test_cpu_adafactor.c.

torch is not installed here, so this transcribes transformers.optimization.Adafactor.step (fp32 parameter,
fp32 / fp16 / bf16 gradient cast with grad.float()) in numpy float32, operation by operation, keeping where
each Python float meets an fp32 tensor (rounded to fp32 there):

    state["step"] += 1
    state["RMS"] = _rms(p)                          ||p||_2 / numel**0.5 (fp32 tensor)
    lr = _get_lr(group, state)                      rel = min(1e-6*t if warmup_init else 1e-2, 1/sqrt(t))
                                                    or group lr; times max(eps2, RMS) if scale_parameter
                                                    (fp32 tensor RMS*rel when RMS > eps2, else Python float)
    beta2t = 1.0 - math.pow(t, decay_rate)
    update = grad**2 + eps1
    factored (ndim >= 2):
        row.mul_(beta2t).add_(update.mean(dim=-1), alpha=1-beta2t)
        col.mul_(beta2t).add_(update.mean(dim=-2), alpha=1-beta2t)
        update = rsqrt(row / row.mean(-1, keepdim)).unsqueeze(-1) * rsqrt(col).unsqueeze(-2); update *= grad
    else:
        v.mul_(beta2t).add_(update, alpha=1-beta2t); update = v.rsqrt() * grad
    update /= (rms(update) / clip_threshold).clamp(min=1)
    update *= lr
    beta1:  exp_avg.mul_(beta1).add_(update, alpha=1-beta1); update = exp_avg
    wd:     p.add_(p, alpha=-wd*lr)
    p.add_(-update)

add_(x, alpha=a) on an fp32 CPU tensor is ATen's vectorized ufunc add, vec::fmadd(x, a, self): one FMA,
emulated here exactly enough as fp32(fp64(x)*fp64(a) + fp64(self)) (the product is exact in fp64; the
double rounding of the sum can differ from a true FMA only when the fp64 sum lands on an fp32 tie).
mean = fp32 sum / count (torch's CPU mean is sum().div_(n)); rsqrt = 1/sqrt in fp32. Sums are numpy fp32
sums (pairwise along the last axis, sequential along the first), torch's are fp32 cascade sums: neither
is the correctly rounded sum, which is why the C side (fp64 accumulation) is compared with a tolerance.

Inputs are not stored: parameters and gradients come from splitmix64 of (seed << 32 | i), top 24 bits
mapped to [-1, 1) (exact in fp32), times a power of two, so the C test regenerates them bit-exactly:
    p0[i] = U(1, i) * pscale           g_t[i] = U(100 + t, i) * gscale * (boost if t == boost_step)
16-bit gradients: the test passes g16 = fp16/bf16(g_t * S) (round to nearest even) and grad_scale = 1/S;
the reference steps with fp32(g16) * fp32(1/S), which is what the C code computes.

Writes test/fixtures/adafactor/hf_adafactor.txt:
  case NAME ROWS COLS FACTORED STEPS GDT S PSCALE GSCALE BOOST_STEP BOOST STRIDE WORK
       HAS_LR LR EPS1 EPS2 CLIP DECAY HAS_BETA1 BETA1 WD SCALE_PARAMETER RELATIVE_STEP WARMUP_INIT
  info T PARAM_RMS LR UPDATE_RMS CLIP_DIV        (fp32 values)
  p T COUNT v...     (master after step T at indices 0, STRIDE, 2*STRIDE, ...)
  m T COUNT v...     (exp_avg, same indices; only with beta1)
  sq T COUNT v...    (exp_avg_sq, same indices; unfactored)
  row T COUNT RCSTRIDE v...  col T COUNT RCSTRIDE v...  (factored; indices 0, RCSTRIDE, ...: whole when
                                                         the length is <= 1000, else every 53rd)
  end
floats as '%.9e' (round-trips fp32). Run: python3 scripts/make_adafactor_fixtures.py (needs numpy)
"""
import math
import os

import numpy as np

f32 = np.float32
f64 = np.float64
M64 = (1 << 64) - 1


def uniform(seed, n):
    """splitmix64((seed << 32) | i) -> top 24 bits -> [-1, 1), exact fp32."""
    with np.errstate(over="ignore"):
        z = (np.uint64(seed) << np.uint64(32)) | np.arange(n, dtype=np.uint64)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    top = (z >> np.uint64(40)).astype(f64)
    return (top / 16777216.0 * 2.0 - 1.0).astype(f32)


def to_bf16(x):
    """fp32 -> bf16 (round to nearest even) -> fp32; no NaN here."""
    u = x.astype(f32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(f32)


def fma(a, b, c):
    return (np.asarray(a, f32).astype(f64) * np.asarray(b, f32).astype(f64) + np.asarray(c, f32).astype(f64)).astype(f32)


# --f64-sums (diagnostics, not the fixture): every sum accumulated in fp64 and rounded once, as the C code
F64_SUMS = "--f64-sums" in os.sys.argv


def fsum(x, axis=None):
    if F64_SUMS:
        return np.sum(x.astype(f64), axis=axis).astype(f32)
    return np.sum(x, axis=axis, dtype=f32)


def rms(x):
    s = fsum(x * x)
    return f32(np.sqrt(s, dtype=f32)) / f32(x.size ** 0.5)


def get_lr(o, step, param_rms):
    """HF _get_lr; returns (lr as fp32, lr as the Python/tensor value, is_tensor)."""
    rel = o["lr"]
    if o["relative_step"]:
        min_step = 1e-6 * step if o["warmup_init"] else 1e-2
        rel = min(min_step, 1.0 / math.sqrt(step))
    if not o["scale_parameter"]:
        return f32(rel), rel, False
    if param_rms > f32(o["eps2"]):  # max(eps2, RMS): the fp32 tensor wins
        lr = f32(param_rms * f32(rel))
        return lr, lr, True
    lr = o["eps2"] * rel
    return f32(lr), lr, False


def hf_step(p, g, st, step, o, factored, rows, cols):
    n = p.size
    param_rms = rms(p)
    lr32, lr_val, lr_tensor = get_lr(o, step, param_rms)
    beta2t = 1.0 - math.pow(step, o["decay_rate"])
    b2, omb2 = f32(beta2t), f32(1.0 - beta2t)
    upd = g * g + f32(o["eps1"])
    if factored:
        u2 = upd.reshape(rows, cols)
        rmean = fsum(u2, axis=-1) / f32(cols)
        cmean = fsum(u2, axis=-2) / f32(rows)
        st["row"] = fma(rmean, omb2, st["row"] * b2)
        st["col"] = fma(cmean, omb2, st["col"] * b2)
        row_mean = fsum(st["row"]) / f32(rows)
        r = f32(1.0) / np.sqrt(st["row"] / row_mean)
        c = f32(1.0) / np.sqrt(st["col"])
        upd = ((r[:, None] * c[None, :]) * g.reshape(rows, cols)).reshape(-1)
    else:
        st["sq"] = fma(upd, omb2, st["sq"] * b2)
        upd = (f32(1.0) / np.sqrt(st["sq"])) * g
    update_rms = rms(upd)
    d = update_rms / f32(o["clip_threshold"])
    if d < f32(1.0):
        d = f32(1.0)
    upd = upd / d
    upd = upd * lr32
    if o["has_beta1"]:
        st["m"] = fma(upd, f32(1 - o["beta1"]), st["m"] * f32(o["beta1"]))
        upd = st["m"]
    if o["weight_decay"] != 0:
        alpha = f32(f32(-o["weight_decay"]) * lr_val) if lr_tensor else f32(-o["weight_decay"] * lr_val)
        p = fma(p, alpha, p)
    p = p - upd
    return p, (param_rms, lr32, update_rms, d)


def opts(**kw):
    o = dict(has_lr=False, lr=0.0, eps1=1e-30, eps2=1e-3, clip_threshold=1.0, decay_rate=-0.8, has_beta1=False,
             beta1=0.0, weight_decay=0.0, scale_parameter=True, relative_step=True, warmup_init=False)
    o.update(kw)
    if "lr" in kw:
        o["has_lr"] = True
    if "beta1" in kw:
        o["has_beta1"] = True
    return o


# name, rows, cols, factored, steps, gdt, S, pscale, gscale, boost_step, boost, stride, work, opts
CASES = [
    ("2d_default", 24, 40, 1, 5, "f32", 1, 0.5, 2**-4, 0, 1, 5, "none", opts()),
    ("2d_tall_fixedlr_beta1", 40, 24, 1, 5, "f32", 1, 0.5, 2**-4, 0, 1, 5, "none",
     opts(lr=1e-3, relative_step=False, scale_parameter=False, beta1=0.9)),
    ("2d_warmup_bf16", 32, 32, 1, 4, "bf16", 1, 0.5, 2**-4, 0, 1, 5, "bf16", opts(warmup_init=True)),
    ("2d_clip_beta1", 20, 36, 1, 5, "f32", 1, 0.5, 2**-4, 3, 64, 4, "none", opts(beta1=0.9)),
    ("2d_small_params_wd_fp16", 16, 48, 1, 4, "f16", 1024, 2**-12, 2**-4, 0, 1, 4, "f16",
     opts(weight_decay=0.01)),
    ("2d_wd_scale_off_beta1", 12, 20, 1, 4, "f32", 1, 0.5, 2**-4, 0, 1, 1, "none",
     opts(scale_parameter=False, weight_decay=0.1, beta1=0.9)),
    ("2d_unfactored", 8, 16, 0, 3, "f32", 1, 0.5, 2**-4, 0, 1, 1, "none", opts(beta1=0.9)),
    ("1d_default", 1, 100, 0, 5, "f32", 1, 0.5, 2**-4, 0, 1, 1, "none", opts()),
    ("1d_fixedlr_scale_beta1_wd_bf16", 1, 77, 0, 5, "bf16", 1, 0.5, 2**-4, 0, 1, 1, "bf16",
     opts(lr=1e-2, relative_step=False, beta1=0.9, weight_decay=0.01)),
    ("1d_clip_warmup_fp16", 1, 64, 0, 4, "f16", 256, 0.5, 2**-4, 2, 64, 1, "f16", opts(warmup_init=True)),
    ("2d_big_beta1_wd_bf16", 150, 1000, 1, 3, "bf16", 1, 0.5, 2**-4, 0, 1, 751, "bf16",
     opts(beta1=0.9, weight_decay=0.01)),
    ("2d_wide", 4, 20000, 1, 3, "f32", 1, 0.5, 2**-4, 0, 1, 401, "none", opts()),
    ("1d_big_fixedlr", 1, 140000, 0, 3, "f32", 1, 0.5, 2**-4, 2, 64, 701, "none",
     opts(lr=1e-3, relative_step=False, scale_parameter=False)),
]


def fmt(xs):
    return " ".join("%.9e" % float(x) for x in xs)


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    out_dir = os.path.join(root, "test", "fixtures", "adafactor")
    os.makedirs(out_dir, exist_ok=True)
    lines = []
    for (name, rows, cols, factored, steps, gdt, S, pscale, gscale, boost_step, boost, stride, work, o) in CASES:
        n = rows * cols
        lines.append("case %s %d %d %d %d %s %r %r %r %d %r %d %s %d %r %r %r %r %r %d %r %r %d %d %d" % (
            name, rows, cols, factored, steps, gdt, float(S), float(pscale), float(gscale), boost_step,
            float(boost), stride, work, o["has_lr"], o["lr"], o["eps1"], o["eps2"], o["clip_threshold"],
            o["decay_rate"], o["has_beta1"], o["beta1"], o["weight_decay"], o["scale_parameter"],
            o["relative_step"], o["warmup_init"]))
        p = uniform(1, n) * f32(pscale)
        st = {"row": np.zeros(rows, f32), "col": np.zeros(cols, f32), "sq": np.zeros(n, f32), "m": np.zeros(n, f32)}
        idx = np.arange(0, n, stride)
        for t in range(1, steps + 1):
            g = uniform(100 + t, n) * f32(gscale)
            if t == boost_step:
                g = g * f32(boost)
            if gdt != "f32":
                gs = g * f32(S)
                g16 = gs.astype(np.float16).astype(f32) if gdt == "f16" else to_bf16(gs)
                g = g16 * f32(1.0 / S)
            p, info = hf_step(p, g, st, t, o, factored, rows, cols)
            lines.append("info %d %s" % (t, fmt(info)))
            lines.append("p %d %d %s" % (t, idx.size, fmt(p[idx])))
            if o["has_beta1"]:
                lines.append("m %d %d %s" % (t, idx.size, fmt(st["m"][idx])))
            if factored:
                rs, cs = (1 if rows <= 1000 else 53), (1 if cols <= 1000 else 53)
                ri, ci = np.arange(0, rows, rs), np.arange(0, cols, cs)
                lines.append("row %d %d %d %s" % (t, ri.size, rs, fmt(st["row"][ri])))
                lines.append("col %d %d %d %s" % (t, ci.size, cs, fmt(st["col"][ci])))
            else:
                lines.append("sq %d %d %s" % (t, idx.size, fmt(st["sq"][idx])))
        lines.append("end")
    path = os.path.join(out_dir, "hf_adafactor.txt") if not F64_SUMS else "/tmp/hf_adafactor_f64sums.txt"
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s (%d cases, %d bytes)" % (path, len(CASES), os.path.getsize(path)))


if __name__ == "__main__":
    main()
