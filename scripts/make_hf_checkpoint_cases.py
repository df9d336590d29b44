#!/usr/bin/env python3
"""make_hf_checkpoint_cases.py: the four kinds of T5 checkpoint transformers writes (issue 14 item 1), with
fp32 references, for t5train's GPU test test/test_gpu_hf_checkpoints.c.

Run where torch + transformers (5.x) + a CUDA GPU exist (the device machine):
    PYTHONUNBUFFERED=1 python3 scripts/make_hf_checkpoint_cases.py --out /tmp/hf_cases \
        [--check ./t5train [--spiece spiece.model --train_file train.jsonl]]
then
    T5TRAIN_HF_CASES=/tmp/hf_cases T5TRAIN_BIN=$PWD/t5train build/test/test_gpu_hf_checkpoints

Writes into --out:
  v10/            T5Config(tie_word_embeddings=True), ReLU: tied and scaled (lm_head input * d_model^-0.5),
                  no lm_head.weight ("tie_word_embeddings": true, "scale_decoder_outputs": true)
  v11/            gated-gelu with its own lm_head.weight (untied, unscaled), as the v1.1 / flan-t5 hub checkpoints
  tied_unscaled/  T5Config(tie_word_embeddings=False) saved by transformers 5.x as it is: 5.x keeps the model tied
                  and writes "tie_word_embeddings": true, "scale_decoder_outputs": false, no lm_head.weight
  sharded/        the v11 model saved with a small max_shard_size: model.safetensors.index.json + shards
  batch.json      B=3 (test/fixtures/t5/batch.json's layout: input_ids, attention_mask, labels, decoder_input_ids)
  ref_<case>.safetensors   fp32.loss (), fp32.logits (B, Tt, V), fp32.grad.<name> for every named_parameters()
                  entry, computed by the model transformers loads back from the folder (from_pretrained), eval mode
                  (dropout off), TF32 off; __metadata__: versions, the config.json text, the tensor names
  cases.json      what each folder holds (config keys, tensor names, whether from_pretrained ties lm_head)
All shapes are tiny (V=32128, D=8), so the whole folder is a few MB.

--check BIN: runs `BIN dump-grads` (fp32, dropout 0) on each case and compares loss / logits / every gradient
with the reference (fp32 tolerances of test_gpu_t5_parity: loss rel 1e-5, rel L2 1e-4). With --spiece and
--train_file it also trains each case one step with t5train (--max_steps 1) and checks the round trip: the
config.json t5train wrote keeps the case's projection and scale, transformers loads the saved folder, and its
logits on the batch equal t5train's (dump-grads on the saved folder). Exit status 1 if any check fails.
"""
import argparse
import json
import os
import subprocess
import sys

import torch


def log(*a):
    print(*a, flush=True)


def make_batch(seed):
    g = torch.Generator().manual_seed(seed)
    B, Ts, Tt = 3, 11, 7
    src_len, tgt_len = [11, 8, 5], [7, 5, 3]
    input_ids = torch.zeros(B, Ts, dtype=torch.long)
    attn = torch.zeros(B, Ts, dtype=torch.long)
    labels = torch.full((B, Tt), -100, dtype=torch.long)
    for b in range(B):
        n = src_len[b]
        input_ids[b, : n - 1] = torch.randint(2, 32100, (n - 1,), generator=g)
        input_ids[b, n - 1] = 1
        attn[b, :n] = 1
        m = tgt_len[b]
        labels[b, : m - 1] = torch.randint(2, 32100, (m - 1,), generator=g)
        labels[b, m - 1] = 1
    dec = torch.zeros_like(labels)
    dec[:, 1:] = labels[:, :-1]
    dec[dec == -100] = 0
    return dict(input_ids=input_ids, attention_mask=attn, labels=labels, decoder_input_ids=dec)


def reference(model_dir, batch, dev):
    from transformers import T5ForConditionalGeneration
    try:
        m = T5ForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        m = T5ForConditionalGeneration.from_pretrained(model_dir, torch_dtype=torch.float32)
    m = m.to(dev).eval()
    out = m(input_ids=batch["input_ids"].to(dev), attention_mask=batch["attention_mask"].to(dev),
            labels=batch["labels"].to(dev), use_cache=False)
    out.loss.backward()
    grads = {n: p.grad.detach().float().cpu().contiguous() for n, p in m.named_parameters()}
    info = dict(lm_head_is_shared=m.lm_head.weight.data_ptr() == m.shared.weight.data_ptr(),
                scale_decoder_outputs=getattr(m.config, "scale_decoder_outputs", None),
                tie_word_embeddings=getattr(m.config, "tie_word_embeddings", None))
    return out.loss.detach().float().cpu(), out.logits.detach().float().cpu().contiguous(), grads, info


def stored_names(model_dir):
    from safetensors import safe_open
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            return sorted(json.load(f)["weight_map"].keys()), True
    with safe_open(os.path.join(model_dir, "model.safetensors"), "pt") as f:
        return sorted(f.keys()), False


def build_cases(out, seed):
    from safetensors.torch import save_file
    from transformers import T5Config, T5ForConditionalGeneration
    V = 32128
    base = dict(vocab_size=V, d_model=8, d_kv=4, num_layers=2, num_decoder_layers=3, num_heads=2, dropout_rate=0.1,
                layer_norm_epsilon=1e-6, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    cases = {}
    for i, name in enumerate(("v10", "v11", "tied_unscaled", "sharded")):
        torch.manual_seed(seed + i)
        if name == "v10":
            cfg = T5Config(d_ff=16, feed_forward_proj="relu", tie_word_embeddings=True, **base)
        else:
            cfg = T5Config(d_ff=12, feed_forward_proj="gated-gelu", tie_word_embeddings=False, **base)
        model = T5ForConditionalGeneration(cfg).float()
        notes = {"tied_after_construction": model.lm_head.weight.data_ptr() == model.shared.weight.data_ptr()}
        if name in ("v11", "sharded"):
            # a real v1.1 / flan-t5 checkpoint has its own lm_head.weight; 5.x ties a fresh model, so untie it
            if notes["tied_after_construction"]:
                g = torch.Generator().manual_seed(seed + 100 + i)
                model.lm_head.weight = torch.nn.Parameter(torch.randn(V, 8, generator=g))
            model.config.tie_word_embeddings = False
        mdir = os.path.join(out, name)
        kw = {"max_shard_size": "300KB"} if name == "sharded" else {}
        model.save_pretrained(mdir, **kw)
        gen = os.path.join(mdir, "generation_config.json")
        if os.path.exists(gen):
            os.remove(gen)
        names, sharded = stored_names(mdir)
        if name in ("v11",) and "lm_head.weight" not in names:
            notes["save_pretrained_dropped_lm_head"] = True  # write the same file with the head
            sd = {n: t.detach().contiguous() for n, t in model.state_dict().items()
                  if n not in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")}
            save_file(sd, os.path.join(mdir, "model.safetensors"), metadata={"format": "pt"})
            names, sharded = stored_names(mdir)
        with open(os.path.join(mdir, "config.json")) as f:
            cj = json.load(f)
        cases[name] = dict(config={k: cj.get(k) for k in ("tie_word_embeddings", "scale_decoder_outputs",
                                                           "feed_forward_proj", "transformers_version")},
                           has_lm_head="lm_head.weight" in names, sharded=sharded, tensors=len(names), notes=notes)
        log(f"{name}: config {cases[name]['config']} lm_head.weight stored: {cases[name]['has_lm_head']} "
            f"sharded: {sharded} ({len(names)} tensors) notes {notes}")
    return cases


def rel_l2(a, ref):
    den = ref.double().norm().item()
    num = (a.double() - ref.double()).norm().item()
    return num / den if den > 0 else (0.0 if num <= 1e-6 else float("inf"))


def dump_grads(binary, model_dir, batch_path, out_path):
    r = subprocess.run([binary, "dump-grads", "--model", model_dir, "--batch", batch_path, "--out", out_path,
                        "--dtype", "fp32", "--dropout", "0"], capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stdout + r.stderr).strip()
    from safetensors.torch import load_file
    return load_file(out_path), ""


def check(args, cases, batch, dev):
    from safetensors.torch import load_file
    bad = 0
    bpath = os.path.join(args.out, "batch.json")
    for name in cases:
        ref = load_file(os.path.join(args.out, f"ref_{name}.safetensors"))
        got, why = dump_grads(args.check, os.path.join(args.out, name), bpath, f"/tmp/dg_{name}.safetensors")
        if got is None:
            log(f"CHECK {name}: FAIL dump-grads: {why}")
            bad += 1
            continue
        loss_rel = abs(got["loss"].item() - ref["fp32.loss"].item()) / abs(ref["fp32.loss"].item())
        lrel = rel_l2(got["logits"], ref["fp32.logits"])
        worst, wname, missing = 0.0, "", []
        for k, v in ref.items():
            if not k.startswith("fp32.grad."):
                continue
            n = k[len("fp32.grad."):]
            if n not in got:
                missing.append(n)
                continue
            e = rel_l2(got[n], v)
            if e > worst:
                worst, wname = e, n
        extra = [n for n in got if n not in ("loss", "logits") and f"fp32.grad.{n}" not in ref]
        ok = loss_rel <= 1e-5 and lrel <= 1e-4 and worst <= 1e-4 and not missing and not extra
        bad += not ok
        log(f"CHECK {name}: {'ok' if ok else 'FAIL'} loss {got['loss'].item():.9g} vs {ref['fp32.loss'].item():.9g} "
            f"(rel {loss_rel:.2e}), logits rel L2 {lrel:.2e}, worst gradient {wname} rel L2 {worst:.2e}"
            + (f", missing {missing}" if missing else "") + (f", extra {extra}" if extra else ""))
        if not (args.spiece and args.train_file):
            continue
        # the round trip: t5train trains one step and saves; transformers loads what it saved
        odir = f"/tmp/rt_{name}"
        r = subprocess.run([args.check, "--model_name_or_path", os.path.join(args.out, name), "--tokenizer_name",
                            args.spiece, "--train_file", args.train_file, "--source_lang", "en", "--target_lang", "ro",
                            "--do_train", "--max_steps", "1", "--per_device_train_batch_size", "2",
                            "--output_dir", odir, "--overwrite_output_dir", "--save_strategy", "no"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            log(f"ROUNDTRIP {name}: FAIL training exit {r.returncode}: {(r.stdout + r.stderr)[-600:]}")
            bad += 1
            continue
        with open(os.path.join(odir, "config.json")) as f:
            cj = json.load(f)
        names, _ = stored_names(odir)
        loss, logits, _, info = reference(odir, batch, dev)
        got, why = dump_grads(args.check, odir, bpath, f"/tmp/dg_rt_{name}.safetensors")
        if got is None:
            log(f"ROUNDTRIP {name}: FAIL dump-grads on the saved folder: {why}")
            bad += 1
            continue
        lrel = rel_l2(got["logits"], logits)
        same_head = ("lm_head.weight" in names) == cases[name]["has_lm_head"]
        same_scale = cj.get("scale_decoder_outputs") == bool(cases[name]["config"]["scale_decoder_outputs"])
        ok = lrel <= 1e-4 and same_head and same_scale
        bad += not ok
        log(f"ROUNDTRIP {name}: {'ok' if ok else 'FAIL'} saved config tie {cj.get('tie_word_embeddings')} scale "
            f"{cj.get('scale_decoder_outputs')}, lm_head.weight saved {'lm_head.weight' in names} (case "
            f"{cases[name]['has_lm_head']}), transformers ties it {info['lm_head_is_shared']}; logits t5train vs "
            f"transformers on the saved folder rel L2 {lrel:.2e}")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--check", help="t5train binary: compare dump-grads with the references")
    ap.add_argument("--spiece", help="spiece.model, for the round trip through a t5train save")
    ap.add_argument("--train_file", help="a small .jsonl en-ro file, for the round trip")
    args = ap.parse_args()
    import safetensors
    import transformers
    from safetensors.torch import save_file
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    versions = dict(torch=torch.__version__, transformers=transformers.__version__, safetensors=safetensors.__version__,
                    gpu=torch.cuda.get_device_name(0))
    log("versions:", json.dumps(versions))
    os.makedirs(args.out, exist_ok=True)
    batch = make_batch(args.seed)
    with open(os.path.join(args.out, "batch.json"), "w") as f:
        json.dump({k: v.tolist() for k, v in batch.items()}, f)
        f.write("\n")
    cases = build_cases(args.out, args.seed)
    for name in cases:
        loss, logits, grads, info = reference(os.path.join(args.out, name), batch, dev)
        cases[name]["from_pretrained"] = info
        tensors = {"fp32.loss": loss.reshape(()), "fp32.logits": logits}
        tensors.update({f"fp32.grad.{n}": g for n, g in grads.items()})
        meta = dict(versions)
        meta["case"] = name
        meta["config"] = json.dumps(cases[name]["config"])
        save_file(tensors, os.path.join(args.out, f"ref_{name}.safetensors"), metadata=meta)
        log(f"{name}: transformers loads it with {info}; fp32 loss {loss.item():.9g}, {len(grads)} gradients")
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump(dict(versions=versions, cases=cases), f, indent=1)
    if args.check:
        bad = check(args, cases, batch, dev)
        log(f"checks failed: {bad}")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
