#!/usr/bin/env python3
"""bench_generate_hf.py: HF transformers `generate` throughput on the inputs of test/bench/bench_generate.c.

    PYTHONUNBUFFERED=1 python3 scripts/bench_generate_hf.py [--max_length 49] [--reps 2] [--ours bench_generate.log]

t5-small, t5-base, t5-large and t5-3b shapes (T5Config, random init on the GPU), eval batch 4 and 32, beams 1 and 4,
min_length = max_length (`</s>` banned, so every sequence runs max_length - 1 steps: the same work as
bench_generate.c; the default 49 = 48 forced new tokens). Two bf16 modes:
  autocast: the fp32 model under torch.autocast("cuda", torch.bfloat16) (what Seq2SeqTrainer does with --bf16,
            and the numerics t5train matches);
  bf16:     the model cast to bf16 (model.to(torch.bfloat16), as bf16_full_eval / DeepSpeed inference).
Sources: row b has len_b = 24 + (13 b mod 40) tokens, token i = 100 + (7919 b + 104729 i) mod 30000, the last one
</s>, padded to the longest row. tokens/s = B * (max_length - 1) / seconds per batch (one warm-up batch, then
--reps timed batches, torch.cuda.synchronize around each); ms/step = ms per batch / (max_length - 1).

--ours LOG: the output of bench_generate (same max_length, run just before on the same GPU); prints the side-by-side
table (t5train vs both HF modes, speed-up, and t5train's step time against its weight-read floor).
"""
import argparse
import copy
import time

import torch

SHAPES = {
    "t5-small": dict(d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8),
    "t5-base": dict(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12),
    "t5-large": dict(d_model=1024, d_kv=64, d_ff=4096, num_layers=24, num_heads=16),
    "t5-3b": dict(d_model=1024, d_kv=128, d_ff=16384, num_layers=24, num_heads=32),
}


def sources(B, dev):
    T = max(24 + (13 * b) % 40 for b in range(B))
    ids = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):
        n = 24 + (13 * b) % 40
        for i in range(n):
            ids[b, i] = 100 + (7919 * b + 104729 * i) % 30000 if i < n - 1 else 1
            mask[b, i] = 1
    return ids.to(dev), mask.to(dev)


def read_ours(path):
    """rows of bench_generate's table: (model, B, beams) -> dict of its columns"""
    rows = {}
    head = None
    for line in open(path):
        if not line.startswith("| "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "model":
            head = cells
            continue
        if head is None or cells[0].startswith("---"):
            continue
        rows[(cells[0], int(cells[1]), int(cells[2]))] = dict(zip(head, cells))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max_length", type=int, default=49)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--models", default="t5-small,t5-base,t5-large,t5-3b")
    ap.add_argument("--ours", default=None)
    args = ap.parse_args()
    import transformers
    from transformers import T5Config, T5ForConditionalGeneration

    dev = torch.device("cuda")
    torch.manual_seed(42)
    steps = args.max_length - 1
    print(f"bench_generate_hf: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}, max_length {args.max_length} ({steps} forced steps), "
          f"{args.reps} timed batch(es)")
    print("| model | mode | batch | beams | ms/batch | ms/step | generated tokens/s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    hf = {}
    for name in args.models.split(","):
        cfg = T5Config(vocab_size=32128, feed_forward_proj="relu", tie_word_embeddings=True,
                       decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, **SHAPES[name])
        with torch.device(dev):
            model32 = T5ForConditionalGeneration(cfg).eval()
        for mode in ("autocast", "bf16"):
            model = model32 if mode == "autocast" else copy.deepcopy(model32).to(torch.bfloat16).eval()
            for B in (4, 32):
                for nb in (1, 4):
                    ids, mask = sources(B, dev)
                    kw = dict(input_ids=ids, attention_mask=mask, max_length=args.max_length,
                              min_length=args.max_length, num_beams=nb, do_sample=False)

                    def once():
                        with torch.no_grad():
                            if mode == "autocast":
                                with torch.autocast("cuda", dtype=torch.bfloat16):
                                    return model.generate(**kw)
                            return model.generate(**kw)

                    out = once()
                    assert out.shape[1] == args.max_length, out.shape
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(args.reps):
                        once()
                    torch.cuda.synchronize()
                    dt = (time.perf_counter() - t0) / args.reps
                    hf[(name, mode, B, nb)] = dt
                    print(f"| {name} | {mode} | {B} | {nb} | {dt * 1e3:.1f} | {dt * 1e3 / steps:.2f} | "
                          f"{B * steps / dt:.0f} |", flush=True)
            if mode == "bf16":
                del model
        del model32
        torch.cuda.empty_cache()

    if args.ours:
        ours = read_ours(args.ours)
        print()
        print(f"side by side ({steps} forced new tokens; speed-up = t5train tokens/s / HF tokens/s; floor = the "
              f"weights one decoder step reads / measured HBM bandwidth, see bench_generate's header line)")
        print("| model | batch | beams | t5train ms/step | t5train tokens/s | HF autocast ms/step | HF bf16 ms/step "
              "| vs HF autocast | vs HF bf16 | floor ms | t5train step / floor |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for name in args.models.split(","):
            for B in (4, 32):
                for nb in (1, 4):
                    o = ours.get((name, B, nb))
                    if o is None:
                        continue
                    ours_dt = float(o["ms/batch"]) * 1e-3
                    a, b = hf[(name, "autocast", B, nb)], hf[(name, "bf16", B, nb)]
                    print(f"| {name} | {B} | {nb} | {o['step ms']} | {o['generated tokens/s']} | "
                          f"{a * 1e3 / steps:.2f} | {b * 1e3 / steps:.2f} | {a / ours_dt:.1f}x | {b / ours_dt:.1f}x | "
                          f"{o['floor ms']} | {o['step/floor']} |")


if __name__ == "__main__":
    main()
