#!/usr/bin/env python3
"""trajectory_parity.py: 50 training steps of t5train against transformers + torch AdamW, same start, same batches.

Run where the t5train binary, a CUDA GPU, torch and transformers exist (the device machine):
    PYTHONUNBUFFERED=1 python3 scripts/trajectory_parity.py --bin ./t5train \
        --tokenizer .devdata/t5-spiece/spiece.model --train_file .devdata/wmt16-ro-en/validation.en \
        --work /tmp/parity --out parity.json

What it does, per precision (fp32, bf16):
  1. builds a small random T5 v1.0 checkpoint with transformers (D=64, H=4, Dk=16, F=128, 2+2 layers, V=32128,
     seed 0), saved with save_pretrained (fp32 safetensors) once;
  2. runs `t5train --do_train --max_steps 50 --logging_steps 1 --dump_batches FILE` from it (dropout 0,
     lr 1e-3, linear schedule with 5 warmup steps, weight decay 0.01 (HF groups), clip 1.0, gradient
     accumulation 2, batch 8: 400 pairs = 25 updates per epoch, so the run crosses an epoch boundary);
  3. replays the dumped batches (the exact token ids t5train trained on) with T5ForConditionalGeneration +
     torch.optim.AdamW (HF's two weight-decay groups) + get_linear_schedule_with_warmup +
     clip_grad_norm_(1.0), each micro-batch loss divided by the number of micro-batches (HF / DeepSpeed), TF32
     off; bf16 = torch.autocast(bf16) over fp32 master weights (HF AMP);
  4. compares the loss of every step (t5train's trainer_log.jsonl vs torch) and the final weights
     (t5train's output_dir/model.safetensors = fp32 master vs the torch model): relative L2 difference.
Tolerances: fp32 1e-4 relative per step, bf16 2e-2. Exit 1 when a tolerance is exceeded.
Documented differences that stay inside them: DeepSpeed's AdamW arithmetic (fp32 running beta powers,
multiply by 1/sqrt(1-b2^t)) vs torch's, and DeepSpeed's combined unscale+clip factor
1/max(1, (norm+1e-6)/clip) vs torch's min(1, clip/(norm+1e-6)).
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys

import torch


def log(*a):
    print(*a, flush=True)


FORBIDDEN = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]


def gets_decay(name):
    # HF Trainer.get_decay_parameter_names (transformers 4.50+ / 5.x) for a model without nn.LayerNorm
    return not any(re.search(p, name.lower()) for p in FORBIDDEN)


def make_checkpoint(path):
    from transformers import T5Config, T5ForConditionalGeneration

    if os.path.exists(os.path.join(path, "model.safetensors")):
        return
    cfg = T5Config(vocab_size=32128, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                   num_heads=4, feed_forward_proj="relu", tie_word_embeddings=True, dropout_rate=0.1,
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    m = T5ForConditionalGeneration(cfg).float()
    m.save_pretrained(path, safe_serialization=True)


# the training flags both sides agree on (test/test_gpu_trainer.c reads them from the reference fixture)
TRAIN_FLAGS = ("--source_lang en --target_lang ro --max_source_length 64 --max_target_length 64 "
               "--max_train_samples 400 --per_device_train_batch_size 8 --gradient_accumulation_steps 2 "
               "--do_train --logging_steps 1 --learning_rate 1e-3 --warmup_steps 5 --weight_decay 0.01 "
               "--max_grad_norm 1.0 --dropout_rate 0 --save_strategy no --seed 1")


def run_t5train(args, ckpt, out, extra=()):
    """t5train with TRAIN_FLAGS and the extra flags (["--bf16"], ["--optim", "adafactor", ...]) from ckpt into out:
    its step losses and the batches it dumped (read_run)"""
    dump = os.path.join(out, "batches.json")
    cmd = [args.bin, "--model_name_or_path", ckpt, "--tokenizer_name", args.tokenizer,
           "--train_file", args.train_file] + TRAIN_FLAGS.split() + list(extra) + [
           "--max_steps", str(args.steps), "--output_dir", out, "--overwrite_output_dir",
           "--dump_batches", dump, "--dump_batches_steps", str(args.steps)]
    log("+", " ".join(cmd))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        log(r.stdout[-4000:])
        raise SystemExit(f"t5train {' '.join(extra)} failed with exit {r.returncode}")
    return read_run(out, dump)


def torch_model(ckpt, dev):
    """the checkpoint in transformers, fp32, TF32 off, dropout 0, training mode"""
    from transformers import T5ForConditionalGeneration

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    model = T5ForConditionalGeneration.from_pretrained(ckpt, dropout_rate=0.0, torch_dtype=torch.float32).to(dev)
    model.train()
    return model


def decay_groups(model, weight_decay=0.01):
    """HF Trainer's two parameter groups (gets_decay)"""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [{"params": [p for n, p in named if gets_decay(n)], "weight_decay": weight_decay},
            {"params": [p for n, p in named if not gets_decay(n)], "weight_decay": 0.0}]


def torch_train(model, opt, sched, batches, steps, dev, amp=None):
    """The replay of t5train's dumped batches: per update, each micro-batch's loss / the number of micro-batches
    (HF / DeepSpeed), clip_grad_norm_(1.0), the optimizer, the schedule (None: none). amp: None (fp32),
    torch.bfloat16 (autocast over the fp32 weights) or torch.float16 (autocast + GradScaler from 2^16: HF AMP).
    Returns the loss of every update."""
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0 ** 16) if amp == torch.float16 else None
    losses = []
    for step in range(steps):
        micro = batches[step]
        tot = 0.0
        for mb in micro:
            kw = {k: torch.tensor(mb[k], device=dev) for k in ("input_ids", "attention_mask", "labels")}
            with torch.autocast(torch.device(dev).type, dtype=amp, enabled=amp is not None):
                loss = model(**kw, use_cache=False).loss
            part = loss / len(micro)
            (scaler.scale(part) if scaler else part).backward()
            tot += loss.item()
        losses.append(tot / len(micro))
        if scaler:
            scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        if sched:
            sched.step()
        opt.zero_grad(set_to_none=True)
    return losses


def run_torch(ckpt, batches, prec, steps, dev="cuda"):
    """torch AdamW (HF's groups) + linear warmup over t5train's batches in prec (fp32, bf16, fp16): the losses and
    the final weights"""
    from transformers import get_linear_schedule_with_warmup

    model = torch_model(ckpt, dev)
    opt = torch.optim.AdamW(decay_groups(model), lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    sched = get_linear_schedule_with_warmup(opt, 5, steps)
    amp = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[prec]
    losses = torch_train(model, opt, sched, batches, steps, dev, amp)
    return losses, {n: p.detach().float().cpu() for n, p in model.named_parameters()}


def read_run(out, dump):
    """the step losses of a t5train run (output_dir/trainer_log.jsonl) and the batches it dumped (--dump_batches)"""
    losses = []
    with open(os.path.join(out, "trainer_log.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            if "max_steps" in d:
                losses.append(d["loss"])
    with open(dump) as f:
        batches = json.load(f)
    return losses, batches


def weights_rel_l2(out, ref):
    from safetensors.torch import load_file

    ours = load_file(os.path.join(out, "model.safetensors"))
    num = den = 0.0
    worst = (0.0, "")
    for n, r in ref.items():
        if n not in ours:
            raise SystemExit(f"{n} missing from t5train's model.safetensors")
        d = (ours[n].float() - r).double()
        num += float((d * d).sum())
        den += float((r.double() ** 2).sum())
        rel = float(d.norm() / max(r.double().norm(), 1e-30))
        if rel > worst[0]:
            worst = (rel, n)
    return math.sqrt(num / den), worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="./t5train")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--train_file", required=True)
    ap.add_argument("--work", default="/tmp/t5train_parity")
    ap.add_argument("--out", default=None, help="write the comparison as JSON here")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--precisions", default="fp32,bf16", help="a list of fp32, bf16, fp32_tf32 (t5train --tf32)")
    ap.add_argument("--init", default=None, help="start from this HF checkpoint dir instead of a new random one")
    ap.add_argument("--write_reference", default=None,
                    help="write the torch fp32 trajectory + flags as a fixture for test/test_gpu_trainer.c")
    args = ap.parse_args()
    import transformers

    os.makedirs(args.work, exist_ok=True)
    ckpt = args.init or os.path.join(args.work, "init")
    if not args.init:
        make_checkpoint(ckpt)
    # fp32_tf32: t5train with --tf32 (fp32-input GEMMs on TF32 tensor cores) against the TF32-off torch fp32
    # trajectory: the error TF32 costs (HF's --tf32 makes the same trade in PyTorch); its tolerance is bf16's
    tol = {"fp32": 1e-4, "bf16": 2e-2, "fp32_tf32": 2e-2}
    flags = {"fp32": [], "bf16": ["--bf16"], "fp32_tf32": ["--tf32", "true"]}
    report = {"torch": torch.__version__, "transformers": transformers.__version__,
              "gpu": torch.cuda.get_device_name(0), "steps": args.steps, "results": {}}
    ok = True
    for prec in args.precisions.split(","):
        out = os.path.join(args.work, prec)
        ours, batches = run_t5train(args, ckpt, out, flags[prec])
        if len(ours) != args.steps or len(batches) != args.steps:
            raise SystemExit(f"{prec}: {len(ours)} loss lines and {len(batches)} dumped updates, expected {args.steps}")
        ref, ref_w = run_torch(ckpt, batches, "fp32" if prec == "fp32_tf32" else prec, args.steps)
        rel = [abs(a - b) / abs(b) for a, b in zip(ours, ref)]
        l2, worst = weights_rel_l2(out, ref_w)
        good = max(rel) <= tol[prec]
        ok &= good
        log(f"== {prec}: max per-step loss rel diff {max(rel):.3e} (step {rel.index(max(rel)) + 1}, tolerance "
            f"{tol[prec]:g}) {'OK' if good else 'FAIL'}; final weights rel L2 diff {l2:.3e} (worst tensor "
            f"{worst[1]} {worst[0]:.3e})")
        for i in range(0, args.steps, 5):
            log(f"   step {i + 1:3d}  t5train {ours[i]:.7f}  torch {ref[i]:.7f}  rel {rel[i]:.2e}")
        report["results"][prec] = {"t5train_loss": ours, "torch_loss": ref, "rel": rel, "max_rel": max(rel),
                                   "tolerance": tol[prec], "weights_rel_l2": l2, "worst_tensor": worst[1],
                                   "worst_tensor_rel_l2": worst[0], "ok": good}
    if args.write_reference and "fp32" in report["results"]:
        r = report["results"]["fp32"]
        ref = {"what": "torch fp32 trajectory (transformers T5 + torch AdamW + linear warmup + clip_grad_norm_) "
                       "on the batches t5train loads with these flags; made by scripts/trajectory_parity.py",
               "model": "test/fixtures/t5/tiny_v10", "tokenizer": "t5-spiece/spiece.model",
               "train_file": "wmt16-ro-en/validation.en", "flags": TRAIN_FLAGS, "max_steps": args.steps,
               "tolerance_rel": tol["fp32"], "torch": report["torch"], "transformers": report["transformers"],
               "gpu": report["gpu"], "torch_loss": r["torch_loss"], "t5train_loss_at_creation": r["t5train_loss"]}
        with open(args.write_reference, "w") as f:
            json.dump(ref, f, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    log("PARITY", "OK" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
