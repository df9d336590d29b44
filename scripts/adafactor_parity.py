#!/usr/bin/env python3
"""adafactor_parity.py: 50 training steps of t5train --optim adafactor against transformers' Adafactor in PyTorch,
same start, same batches, in 4 settings (relative_step on/off x beta1 None/0.9). Issue 20, item 1 "Show".

Run where the t5train binary, a CUDA GPU, torch and transformers exist (the device machine); t5train needs the
GPU, and the torch side replays the token ids t5train dumps, so the fixture cannot be made on a machine without a
GPU (the torch side alone would run on the CPU with --torch_device cpu, fp32):
    PYTHONUNBUFFERED=1 python3 scripts/adafactor_parity.py --bin build/t5train \
        --tokenizer $T5TRAIN_DATA/t5-spiece/spiece.model --train_file $T5TRAIN_DATA/wmt16-ro-en/validation.en \
        --work /tmp/ada_parity --out ada_parity.json --write_reference test/fixtures/trainer
which writes test/fixtures/trainer/adafactor_tiny_v10_fp32.{json,safetensors}, read by test/test_gpu_trainer.c
(test_adafactor_matches_torch_fp32; it skips while they are absent).

The setup is scripts/trajectory_parity.py's (imported from it): the tiny HF fixture model test/fixtures/t5/tiny_v10,
fp32, dropout 0, batch 8, gradient accumulation 2, 400 pairs (25 updates per epoch: the run crosses an epoch
boundary), weight decay 0.01 on HF's decay group, clip_grad_norm_(1.0), TF32 off; each micro-batch loss divided by
the number of micro-batches. The optimizer, per setting:
  rel_off_*: --optim adafactor = HF Trainer's Adafactor(lr=1e-3, scale_parameter=False, relative_step=False,
             warmup_init=False) + get_linear_schedule_with_warmup(5 warmup steps), as Trainer builds it;
  rel_on_*:  --adafactor_relative_step true --adafactor_scale_parameter true = Adafactor(lr=None,
             relative_step=True, scale_parameter=True, warmup_init=False) (transformers' defaults; no LR schedule:
             Adafactor's own step size);
  *_b1_none: beta1 None (HF's default); *_b1_0.9: --adafactor_beta1 0.9 = Adafactor(beta1=0.9).
Compared: the loss of every step (t5train's trainer_log.jsonl vs torch), relative difference <= 1e-5; the final
weights (t5train's output_dir/model.safetensors, the fp32 master, vs the torch model), relative L2 <= 1e-5.

The fixture keeps the torch losses of every setting and the final torch weights, made small (about 0.7 MB instead
of 4.2): every tensor but shared.weight in full (2,784 of tiny_v10's 259,808 parameters), and of shared.weight
(32128 x 8; tied, so the lm_head gives every row a gradient) the rows of the token ids the 50 updates feed the
model plus every 16th row (<setting>/shared.weight.rows, their ids in shared.weight.row_ids as F32, exact below
2^24) and the sum of squares of the whole tensor (<setting>/shared.weight.sumsq). The GPU test's weight check is
therefore the relative L2 over those elements (a sample of the embedding); this script's own check, and
weights_rel_l2_at_creation in the fixture, cover every weight.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trajectory_parity import (TRAIN_FLAGS, decay_groups, log, run_t5train, torch_model,  # noqa: E402
                               torch_train, weights_rel_l2)

SETTINGS = {
    "rel_off_b1_none": "",
    "rel_off_b1_0.9": "--adafactor_beta1 0.9",
    "rel_on_b1_none": "--adafactor_relative_step true --adafactor_scale_parameter true",
    "rel_on_b1_0.9": "--adafactor_relative_step true --adafactor_scale_parameter true --adafactor_beta1 0.9",
}
TOL_LOSS = 1e-5
TOL_WEIGHTS = 1e-5


def run_torch(ckpt, batches, setting, steps, dev):
    """transformers' Adafactor (HF's groups) in one of the SETTINGS over t5train's batches"""
    from transformers import get_linear_schedule_with_warmup
    from transformers.optimization import Adafactor

    model = torch_model(ckpt, dev)
    groups = decay_groups(model)
    rel = setting.startswith("rel_on")
    beta1 = 0.9 if setting.endswith("0.9") else None
    if rel:
        opt = Adafactor(groups, lr=None, relative_step=True, scale_parameter=True, warmup_init=False, beta1=beta1)
        sched = None
    else:
        opt = Adafactor(groups, lr=1e-3, relative_step=False, scale_parameter=False, warmup_init=False, beta1=beta1)
        sched = get_linear_schedule_with_warmup(opt, 5, steps)
    losses = torch_train(model, opt, sched, batches, steps, dev)
    return losses, {n: p.detach().float().cpu() for n, p in model.named_parameters()}


def used_rows(batches, vocab):
    ids = set()
    for micro in batches:
        for mb in micro:
            for key in ("input_ids", "labels"):
                for row in mb[key]:
                    ids.update(t for t in row if t >= 0)
    ids.add(0)  # the decoder start token (pad) shifted into every decoder input
    ids.update(range(0, vocab, 16))  # a uniform sample of the rest
    return sorted(ids)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="./t5train")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--train_file", required=True)
    ap.add_argument("--work", default="/tmp/t5train_ada_parity")
    ap.add_argument("--out", default=None, help="write the comparison as JSON here")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--init", default=None, help="HF checkpoint dir (default: the repo's test/fixtures/t5/tiny_v10)")
    ap.add_argument("--torch_device", default="cuda")
    ap.add_argument("--write_reference", default=None,
                    help="folder for adafactor_tiny_v10_fp32.{json,safetensors} (test/fixtures/trainer)")
    args = ap.parse_args()
    import transformers
    from safetensors.torch import save_file

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ckpt = args.init or os.path.join(repo, "test/fixtures/t5/tiny_v10")
    os.makedirs(args.work, exist_ok=True)
    report = {"torch": torch.__version__, "transformers": transformers.__version__,
              "device": torch.cuda.get_device_name(0) if args.torch_device == "cuda" else "cpu",
              "steps": args.steps, "results": {}}
    ok = True
    fixture_w = {}
    fixture = {"what": "torch fp32 trajectories of transformers' Adafactor (HF weight-decay groups, clip_grad_norm_ "
                       "1.0) on the batches t5train loads with these flags; made by scripts/adafactor_parity.py",
               "model": "test/fixtures/t5/tiny_v10", "tokenizer": "t5-spiece/spiece.model",
               "train_file": "wmt16-ro-en/validation.en", "flags": TRAIN_FLAGS + " --optim adafactor",
               "max_steps": args.steps, "tolerance_loss_rel": TOL_LOSS, "tolerance_weights_rel_l2": TOL_WEIGHTS,
               "torch": report["torch"], "transformers": report["transformers"], "device": report["device"],
               "settings": {}}
    for name in args.settings.split(","):
        out = os.path.join(args.work, name)
        ours, batches = run_t5train(args, ckpt, out, ["--optim", "adafactor"] + SETTINGS[name].split())
        if len(ours) != args.steps or len(batches) != args.steps:
            raise SystemExit(f"{name}: {len(ours)} loss lines and {len(batches)} dumped updates, expected {args.steps}")
        ref, ref_w = run_torch(ckpt, batches, name, args.steps, args.torch_device)
        rel = [abs(a - b) / abs(b) for a, b in zip(ours, ref)]
        l2, worst = weights_rel_l2(out, ref_w)
        good = max(rel) <= TOL_LOSS and l2 <= TOL_WEIGHTS
        ok &= good
        log(f"== {name}: max per-step loss rel diff {max(rel):.3e} (step {rel.index(max(rel)) + 1}, tolerance "
            f"{TOL_LOSS:g}); final weights rel L2 {l2:.3e} (tolerance {TOL_WEIGHTS:g}; worst tensor {worst[1]} "
            f"{worst[0]:.3e}) {'OK' if good else 'FAIL'}")
        for i in range(0, args.steps, 5):
            log(f"   step {i + 1:3d}  t5train {ours[i]:.7f}  torch {ref[i]:.7f}  rel {rel[i]:.2e}")
        report["results"][name] = {"t5train_loss": ours, "torch_loss": ref, "rel": rel, "max_rel": max(rel),
                                   "weights_rel_l2": l2, "worst_tensor": worst[1], "worst_tensor_rel_l2": worst[0],
                                   "ok": good}
        fixture["settings"][name] = {"extra_flags": SETTINGS[name], "torch_loss": ref,
                                     "t5train_loss_at_creation": ours, "weights_rel_l2_at_creation": l2}
        sw = ref_w["shared.weight"]
        rows = used_rows(batches, sw.shape[0])
        fixture_w["shared.weight.row_ids"] = torch.tensor(rows, dtype=torch.float32)
        fixture_w[f"{name}/shared.weight.rows"] = sw[rows].contiguous()
        fixture_w[f"{name}/shared.weight.sumsq"] = torch.tensor([float((sw.double() ** 2).sum())],
                                                                dtype=torch.float32)
        for n, w in ref_w.items():
            if n != "shared.weight":
                fixture_w[f"{name}/{n}"] = w.contiguous()
    if args.write_reference:
        os.makedirs(args.write_reference, exist_ok=True)
        base = os.path.join(args.write_reference, "adafactor_tiny_v10_fp32")
        with open(base + ".json", "w") as f:
            json.dump(fixture, f, indent=1)
        save_file(fixture_w, base + ".safetensors", metadata={"what": "final torch weights, see the .json"})
        log(f"wrote {base}.json and {base}.safetensors")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    log("PARITY", "OK" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
