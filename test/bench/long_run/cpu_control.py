#!/usr/bin/env python3
"""cpu_control.py: does a from-scratch T5 learn a learnable task at all, and with which optimizer? A CPU control
with transformers' own T5 (no t5train, no GPU), small enough for two cores: the task search of
docs/training_results.md section 6 (finding 5).

    python3 test/bench/long_run/cpu_control.py --data .devdata/long_run --task codes --pieces 3 \
        --optim adafactor_t5 --steps 1200

A T5 of d_model 128 (d_kv 16, d_ff 512, 2 + 2 layers, 8 heads, dropout 0.1, transformers' init, seed 0) trains on
batches of 32 random examples of task_<task>_train.jsonl (make_data.py), the sources cut into pieces of --pieces words
(0: whole sentences) and transformed again with make_data's rule, prefix "encode: ", max length 128, clip 1.0:
  --optim adamw         torch AdamW at --lr, 300 warm-up steps then linear decay to 0 at --steps
  --optim adafactor_t5  transformers' Adafactor(scale_parameter=True, relative_step=True, warmup_init=False, lr=None)
Prints the training loss every 100 steps and greedy generations of the first 8 training pieces at the end.
"""
import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_data  # noqa: E402


def pieces(data, task, n):
    """(source, target) pairs: the task's English sources cut into pieces of n words, each transformed again."""
    with open(os.path.join(data, "train.jsonl"), encoding="utf-8") as f:
        english = [json.loads(line)["translation"]["en"] for line in f]
    codes = make_data.code_table(english, make_data.CODES)
    out = []
    for en in english:
        w = en.split()
        chunks = [" ".join(w[i:i + n]) for i in range(0, len(w), n)] if n > 0 else [en]
        out += [(c, make_data.transform(c, codes, task)) for c in chunks]
    return out


def main():
    import torch
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration
    from transformers.optimization import Adafactor

    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--task", default="codes", choices=["codes", "reverse_codes", "swap_codes"])
    ap.add_argument("--pieces", type=int, default=3)
    ap.add_argument("--optim", default="adafactor_t5", choices=["adamw", "adafactor_t5"])
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=1200)
    a = ap.parse_args()
    torch.manual_seed(0)
    random.seed(0)
    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(os.path.join(a.data, "tokenizer"))
    pairs = pieces(a.data, a.task, a.pieces)
    cfg = T5Config(vocab_size=32128, d_model=128, d_kv=16, d_ff=512, num_layers=2, num_heads=8, dropout_rate=0.1,
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    model = T5ForConditionalGeneration(cfg)
    if a.optim == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min((s + 1) / 300, max(0.0, (a.steps - s) / (a.steps - 300))))
    else:
        opt = Adafactor(model.parameters(), scale_parameter=True, relative_step=True, warmup_init=False, lr=None)
        sched = None
    t0 = time.time()
    for step in range(a.steps):
        batch = random.sample(pairs, 32)
        x = tok(["encode: " + s for s, _ in batch], return_tensors="pt", padding=True, truncation=True, max_length=128)
        y = tok(text_target=[t for _, t in batch], return_tensors="pt", padding=True, truncation=True,
                max_length=128).input_ids
        y[y == tok.pad_token_id] = -100
        loss = model(**x, labels=y).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if sched:
            sched.step()
        opt.zero_grad()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f} ({time.time() - t0:.0f} s)", flush=True)
    model.eval()
    x = tok(["encode: " + s for s, _ in pairs[:8]], return_tensors="pt", padding=True)
    out = tok.batch_decode(model.generate(**x, max_new_tokens=40), skip_special_tokens=True)
    for (_, t), o in zip(pairs[:8], out):
        print(f"{t!r} -> {o!r}")


if __name__ == "__main__":
    main()
