#!/usr/bin/env python3
"""bench_generate_hf.py: HF transformers `generate` throughput on the inputs of test/bench/bench_generate.c.

    PYTHONUNBUFFERED=1 python3 scripts/bench_generate_hf.py [--max_length 128] [--reps 3]

t5-small and t5-base shapes (T5Config, random init), eval batch 4 and 32, beams 1 and 4, min_length = max_length
(`</s>` banned, so every sequence runs max_length - 1 steps: the same work as bench_generate.c). Two bf16 modes:
  autocast: the fp32 model under torch.autocast("cuda", torch.bfloat16) (what Seq2SeqTrainer does with --bf16,
            and the numerics t5train matches);
  bf16:     the model cast to bf16 (model.to(torch.bfloat16), as bf16_full_eval / DeepSpeed inference).
Sources: row b has len_b = 24 + (13 b mod 40) tokens, token i = 100 + (7919 b + 104729 i) mod 30000, the last one
</s>, padded to the longest row. tokens/s = B * (max_length - 1) / seconds per batch (one warm-up batch, then
--reps timed batches, torch.cuda.synchronize around each).
"""
import argparse
import time

import torch

SHAPES = {
    "t5-small": dict(d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8),
    "t5-base": dict(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12),
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max_length", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--models", default="t5-small,t5-base")
    args = ap.parse_args()
    import transformers
    from transformers import T5Config, T5ForConditionalGeneration

    dev = torch.device("cuda")
    torch.manual_seed(42)
    print(f"bench_generate_hf: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}, max_length {args.max_length}, {args.reps} timed batch(es)")
    print("| model | mode | batch | beams | ms/batch | generated tokens/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in args.models.split(","):
        cfg = T5Config(vocab_size=32128, feed_forward_proj="relu", tie_word_embeddings=True,
                       decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, **SHAPES[name])
        model32 = T5ForConditionalGeneration(cfg).to(dev).eval()
        for mode in ("autocast", "bf16"):
            model = model32 if mode == "autocast" else T5ForConditionalGeneration(cfg).to(dev).to(torch.bfloat16).eval()
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
                    print(f"| {name} | {mode} | {B} | {nb} | {dt * 1e3:.1f} | {B * (args.max_length - 1) / dt:.0f} |",
                          flush=True)
            if mode == "bf16":
                del model
        del model32
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
