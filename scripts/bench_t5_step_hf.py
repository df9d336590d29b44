#!/usr/bin/env python3
"""bench_t5_step_hf.py: HF transformers T5 (PyTorch eager) training-step time on the shapes of
test/bench/bench_t5_step.c, for the side-by-side table of scripts/bench_t5_step.sh (docs/benchmarks.md).

  python3 scripts/bench_t5_step_hf.py [--models t5-small,t5-base,t5-large,t5-3b] [--shapes 1x48x48,8x128x128]
      [--dtypes bf16,fp16] [--modes amp,pure,pure_adamw] [--warmup 3] [--iters 10] [--csv FILE]

Models: T5ForConditionalGeneration built from a T5Config with the preset dimensions (no download), random
weights from transformers' own _init_weights, created directly on the GPU, train mode (dropout 0.1, as ours).
Batch: random ids in [2, V), no padding, labels random ids (the model shifts them right), set once on the GPU.
Modes (what each times; CUDA events around each step, back to back after `warmup` steps, the median):
  amp         fp32 parameters, forward under torch.autocast(dtype), loss.backward() -> fp32 .grad.
              The same numerics as ours (fp32 master/grad, X GEMMs): the like-with-like comparison.
  pure        model.to(dtype): parameters, activations and .grad all in dtype; forward + loss.backward().
  pure_adamw  pure + torch.optim.AdamW(lr 1e-4).step() (foreach, the default) after the backward: the
              "fwd+bwd+AdamW step, random weights, bf16" reference point of the issue.
  amp_compile amp on torch.compile(model) with the Trainer's --torch_compile defaults (backend "inductor", mode
              None: transformers' Trainer compiles the model so); the compilation runs in the warm-up steps (issue 30:
              "HF + torch.compile beside it"). Not yet run on the device.
Every step starts with model.zero_grad(set_to_none=True) (HF Trainer). No GradScaler for fp16 (a constant
loss scale costs one multiply; overflow checks are not timed on either side).
Memory: torch.cuda.max_memory_allocated and max_memory_reserved over the timed steps (peak stats reset after
the model is built, so they include the parameters).
"""
import argparse
import gc
import sys

import torch
from transformers import T5Config, T5ForConditionalGeneration

# name: (d_model, d_kv, d_ff, num_layers, num_heads) -- the values of model/t5_config.c's presets (v1.0: ReLU, tied)
PRESETS = {
    "t5-small": (512, 64, 2048, 6, 8),
    "t5-base": (768, 64, 3072, 12, 12),
    "t5-large": (1024, 64, 4096, 24, 16),
    "t5-3b": (1024, 128, 16384, 24, 32),
}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def build(name, pure_dtype):
    d, dk, ff, L, H = PRESETS[name]
    cfg = T5Config(vocab_size=32128, d_model=d, d_kv=dk, d_ff=ff, num_layers=L, num_decoder_layers=L, num_heads=H,
                   relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.1,
                   layer_norm_epsilon=1e-6, feed_forward_proj="relu", tie_word_embeddings=True,
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    with torch.device("cuda"):
        model = T5ForConditionalGeneration(cfg)
    if pure_dtype is not None:
        model = model.to(pure_dtype)
    model.train()
    return model


def time_steps(model, mode, dt, B, Ts, Tt, warmup, iters):
    g = torch.Generator(device="cuda").manual_seed(12345)
    ids = torch.randint(2, 32128, (B, Ts), device="cuda", generator=g)
    mask = torch.ones_like(ids)
    labels = torch.randint(2, 32128, (B, Tt), device="cuda", generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4) if mode == "pure_adamw" else None

    def step():
        model.zero_grad(set_to_none=True)
        if mode in ("amp", "amp_compile"):
            with torch.autocast("cuda", dtype=dt):
                out = model(input_ids=ids, attention_mask=mask, labels=labels)
        else:
            out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        if opt is not None:
            opt.step()
        return out.loss

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    ev[0].record()
    for i in range(iters):
        loss = step()
        ev[i + 1].record()
    torch.cuda.synchronize()
    ms = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(iters))
    med = ms[iters // 2] if iters % 2 else 0.5 * (ms[iters // 2 - 1] + ms[iters // 2])
    res = dict(ms_median=med, ms_min=ms[0], ms_max=ms[-1], loss=float(loss.detach()),
               alloc=torch.cuda.max_memory_allocated() / 2**30, reserved=torch.cuda.max_memory_reserved() / 2**30)
    del opt
    model.zero_grad(set_to_none=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="t5-small,t5-base,t5-large,t5-3b")
    ap.add_argument("--shapes", default="1x48x48,8x128x128")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--modes", default="amp,pure")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--csv")
    a = ap.parse_args()
    import transformers
    print(f"bench_t5_step_hf: torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name()}; warmup {a.warmup}, median of {a.iters}", flush=True)
    csv = open(a.csv, "w") if a.csv else None
    if csv:
        csv.write("model,dtype,B,Ts,Tt,mode,ms_median,ms_min,ms_max,tok_s,alloc_gib,reserved_gib,loss\n")
    shapes = [tuple(int(x) for x in s.split("x")) for s in a.shapes.split(",")]
    for name in a.models.split(","):
        for dname in a.dtypes.split(","):
            dt = DTYPES[dname]
            for mode in a.modes.split(","):
                model = build(name, None if mode in ("amp", "amp_compile") else dt)
                if mode == "amp_compile":
                    model = torch.compile(model, backend="inductor", mode=None)
                for (B, Ts, Tt) in shapes:
                    torch.cuda.empty_cache()
                    r = time_steps(model, mode, dt, B, Ts, Tt, a.warmup, a.iters)
                    tok_s = B * (Ts + Tt) / (r["ms_median"] * 1e-3)
                    print(f"{name:10s} {dname:5s} {B:2d} x ({Ts:3d} + {Tt:3d}) hf-{mode:10s} {r['ms_median']:9.3f} ms "
                          f"(min {r['ms_min']:8.3f} max {r['ms_max']:8.3f}) {tok_s:10.0f} tok/s  alloc "
                          f"{r['alloc']:7.2f} GiB reserved {r['reserved']:7.2f} GiB  loss {r['loss']:.4f}", flush=True)
                    if csv:
                        csv.write(f"{name},{dname},{B},{Ts},{Tt},hf-{mode},{r['ms_median']:.4f},{r['ms_min']:.4f},"
                                  f"{r['ms_max']:.4f},{tok_s:.1f},{r['alloc']:.4f},{r['reserved']:.4f},"
                                  f"{r['loss']:.6f}\n")
                        csv.flush()
                del model
                gc.collect()
                torch.cuda.empty_cache()
    if csv:
        csv.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
