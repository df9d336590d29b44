#!/usr/bin/env python3
"""make_generate_fixtures.py: HF transformers `generate` references for t5train's generation test
(test/fixtures/generate/, read by test/test_gpu_generate.c).

Two steps, from the repository root:
  1. here (CPU, transformers + sentencepiece, no torch needed):
       python3 scripts/make_generate_fixtures.py tokenize --data ../shared/data --out test/fixtures/generate
     writes batches.json (the token ids of the sources, batched and padded);
  2. where torch + transformers + a CUDA GPU exist (the device machine):
       PYTHONUNBUFFERED=1 python3 scripts/make_generate_fixtures.py generate --out test/fixtures/generate
     reads batches.json, writes generate.json.
(transformers 5.x `T5Tokenizer(vocab_file=...)` maps every piece to <unk>: the tokenizer is built with
AutoTokenizer.from_pretrained on a temp dir holding spiece.model, as scripts/make_tokenizer_fixtures.py does.)

What it does:
  * tokenizes the first --n sources (64) of wmt16-ro-en/validation.en with the real T5 tokenizer
    (t5-spiece/spiece.model), prefix
    "translate English to Romanian: ", truncated to --max_source_length tokens incl. </s>) and cuts them into
    batches of --batch_size (8) padded to the longest source of each batch (pad 0, attention_mask 0) -- the
    batches run_translation's DataCollatorForSeq2Seq builds;
  * loads the random-weight checkpoints test/fixtures/t5/tiny_v10 and tiny_v11 in fp32 and makes `</s>` likely:
    the eos row of the output projection (shared.weight[1] for the tied v1.0, lm_head.weight[1] for v1.1) is
    multiplied by eos_scale, the smallest power of two for which at least half of the greedy fp32 sequences
    end before max_length (random weights almost never pick `</s>`, which would leave the finished-hypothesis
    logic of beam search untested). The test applies the same exact (power of two) scaling;
  * runs model.generate (eager attention) on every batch for each case below, fp32 with TF32 off, and bf16 as the fp32 model under
    torch.autocast("cuda", torch.bfloat16) (HF AMP, the numerics t5train matches), and stores the returned
    sequences (decoder start token first, HF's padding/fill after the end).

Output: batches.json = {"batches": [{"input_ids", "attention_mask"}], ...};
  generate.json = {"versions", "max_length", "models": {name: {"eos_scale"}}, "cases": [{"model", "dtype", "num_beams", "length_penalty", "early_stopping",
  "min_length", "attn", "sequences": [per batch: [rows]]}]}.
  attn "eager" (the numerics model/t5.c matches, as test/fixtures/t5) for every case; "sdpa" (transformers 5's
  default attention for T5) for four more, compared for information only.
"""
import argparse
import json
import os
import platform
import sys


def log(*a):
    print(*a, flush=True)


CASES = [
    # attention implementation, dtype, num_beams, length_penalty, early_stopping, min_length
    ("eager", "fp32", 1, 1.0, False, 0),
    ("eager", "fp32", 4, 1.0, False, 0),
    ("eager", "fp32", 1, 1.0, False, 8),
    ("eager", "fp32", 4, 2.0, True, 0),
    ("eager", "fp32", 4, 0.5, "never", 6),
    ("eager", "fp32", 3, -0.5, False, 0),
    ("eager", "bf16", 1, 1.0, False, 0),
    ("eager", "bf16", 4, 1.0, False, 0),
    # transformers 5's default attention for T5 (SDPA: Q K^T is not rounded to bf16, the bias is): information only
    ("sdpa", "fp32", 1, 1.0, False, 0),
    ("sdpa", "fp32", 4, 1.0, False, 0),
    ("sdpa", "bf16", 1, 1.0, False, 0),
    ("sdpa", "bf16", 4, 1.0, False, 0),
]


def tokenize(args):
    import shutil
    import tempfile

    from transformers import AutoTokenizer

    tmp = tempfile.mkdtemp()
    shutil.copy(os.path.join(args.data, "t5-spiece", "spiece.model"), tmp)
    with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "T5Tokenizer", "extra_ids": 100, "model_max_length": 512}, f)
    tok = AutoTokenizer.from_pretrained(tmp)
    with open(os.path.join(args.data, "wmt16-ro-en", "validation.en"), encoding="utf-8") as f:
        src = [l.rstrip("\n") for l in f][: args.n]
    prefix = "translate English to Romanian: "
    enc = tok([prefix + s for s in src], max_length=args.max_source_length, truncation=True)
    batches = []
    for i in range(0, len(src), args.batch_size):
        ids = enc["input_ids"][i : i + args.batch_size]
        T = max(len(x) for x in ids)
        batches.append({
            "input_ids": [x + [0] * (T - len(x)) for x in ids],
            "attention_mask": [[1] * len(x) + [0] * (T - len(x)) for x in ids],
        })
    log(f"{len(src)} sources, {len(batches)} batches, lengths {[len(b['input_ids'][0]) for b in batches]}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "batches.json"), "w") as f:
        json.dump({"prefix": prefix, "n": len(src), "batch_size": args.batch_size,
                   "max_source_length": args.max_source_length, "batches": batches}, f, separators=(",", ":"))
    log("wrote", os.path.join(args.out, "batches.json"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("step", choices=["tokenize", "generate"])
    ap.add_argument("--data", help="the shared data folder (tokenize)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--batch_size", type=int, default=8)
    ap.add_argument("--max_length", type=int, default=32)
    ap.add_argument("--max_source_length", type=int, default=64)
    args = ap.parse_args()
    if args.step == "tokenize":
        return tokenize(args)

    import torch
    import transformers
    from transformers import T5ForConditionalGeneration

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    dev = torch.device("cuda")
    with open(os.path.join(args.out, "batches.json")) as f:
        bj = json.load(f)
    batches = bj["batches"]

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version(), "cuda": torch.version.cuda,
                     "gpu": torch.cuda.get_device_name(0)},
        "max_length": args.max_length, "batch_size": bj["batch_size"], "n": bj["n"],
        "models": {}, "cases": [],
    }

    from transformers import DynamicCache, EncoderDecoderCache

    def run(model, b, dtype, nb, lp, es, ml):
        ids = torch.tensor(b["input_ids"], device=dev)
        am = torch.tensor(b["attention_mask"], device=dev)
        kw = dict(input_ids=ids, attention_mask=am, max_length=args.max_length, num_beams=nb, do_sample=False,
                  length_penalty=lp, early_stopping=es, min_length=ml)
        if model.config.num_decoder_layers != model.config.num_layers:
            # transformers 5.17 sizes the default cache by config.num_layers (the encoder's): a decoder with more
            # blocks fails with "list index out of range" in cache_utils. Caches built without a config grow
            # layer by layer.
            kw["past_key_values"] = EncoderDecoderCache(DynamicCache(), DynamicCache())
        def gen(kw):
            with torch.no_grad():
                if dtype == "bf16":
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        return model.generate(**kw)
                return model.generate(**kw)

        try:
            seq = gen(kw)
        except Exception as e:  # noqa: BLE001 -- fall back to HF's uncached decoder (same math, recomputed)
            log(f"  generate with a cache failed ({type(e).__name__}: {e}); using use_cache=False")
            kw.pop("past_key_values", None)
            kw["use_cache"] = False
            seq = gen(kw)
            out["uncached"] = True
        return seq.cpu().tolist()

    for name in ("tiny_v10", "tiny_v11"):
        path = os.path.join(root, "test", "fixtures", "t5", name)
        # eager attention: the numerics model/t5.c matches (and test/fixtures/t5 uses); SDPA cases load their own copy
        base = T5ForConditionalGeneration.from_pretrained(path, dtype=torch.float32,
                                                          attn_implementation="eager").to(dev).eval()
        tied = base.lm_head.weight.data_ptr() == base.shared.weight.data_ptr()
        log(f"{name}: lm_head tied to shared: {tied}")
        orig = base.lm_head.weight[1].detach().clone()
        chosen = None
        for k in range(0, 7):
            scale = float(2 ** k)
            with torch.no_grad():
                base.lm_head.weight[1].copy_(orig * scale)
            ended = total = 0
            for b in batches:
                for row in run(base, b, "fp32", 1, 1.0, False, 0):
                    total += 1
                    ended += 1 in row[1:]
            log(f"  eos_scale {scale:g}: {ended}/{total} greedy sequences end before max_length")
            if ended * 2 >= total:
                chosen = scale
                break
        if chosen is None:
            sys.exit(f"{name}: no eos scale up to 64 makes half of the sequences end")
        out["models"][name] = {"eos_scale": chosen, "tied": tied}
        sdpa = T5ForConditionalGeneration.from_pretrained(path, dtype=torch.float32,
                                                          attn_implementation="sdpa").to(dev).eval()
        with torch.no_grad():
            sdpa.lm_head.weight[1].mul_(chosen)
        for attn, dtype, nb, lp, es, ml in CASES:
            model = base if attn == "eager" else sdpa
            seqs = [run(model, b, dtype, nb, lp, es, ml) for b in batches]
            ends = sum(1 in row[1:] for bs in seqs for row in bs)
            log(f"  {attn} {dtype} beams {nb} lp {lp} es {es} min_length {ml}: widths {[len(s[0]) for s in seqs]}, "
                f"{ends} sequences contain </s>")
            case = {"model": name, "attn": attn, "dtype": dtype, "num_beams": nb, "length_penalty": lp,
                    "early_stopping": es, "min_length": ml, "sequences": seqs}
            out["cases"].append(case)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "generate.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
    log("wrote", os.path.join(args.out, "generate.json"))


if __name__ == "__main__":
    main()
