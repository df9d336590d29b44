#!/usr/bin/env python3
"""make_t5_fixtures.py: HF transformers reference fixtures for t5train's model tests (test/fixtures/t5/).

Run where torch + transformers + a CUDA GPU exist (the device machine):
    PYTHONUNBUFFERED=1 python3 scripts/make_t5_fixtures.py --out test/fixtures/t5

Writes (all small; see test/fixtures/t5/README.md for the exact settings):
  tiny_v10/{config.json,model.safetensors}   T5 v1.0 shape: ReLU FF, tied embeddings (lm_head input scaled by
                                             D^-0.5), D=8 H=2 Dk=4 F=16, 2 encoder + 2 decoder layers
  tiny_v11/{config.json,model.safetensors}   T5 v1.1 shape: gated-gelu (gelu_new), untied lm_head,
                                             D=8 H=3 Dk=4 (H*Dk=12 != D) F=12, 2 encoder + 3 decoder layers
      both V=32128, written by save_pretrained (safetensors) in fp16; every weight is exactly an fp16 value, and
      the fp32 references below use exactly those values.
  batch.json        B=3: input_ids / attention_mask (Ts=11, source padding), labels (Tt=7, -100 padding),
                    decoder_input_ids (HF _shift_right of the labels)
  ref_v10.safetensors, ref_v11.safetensors   per model, for each precision P in fp32, fp16, bf16:
      P.loss                  () F32
      P.logits                (R, V) F32, rows b*Tt+t listed in __metadata__["P.logits_rows"]
      P.grad.<hf name>        F32, every parameter (named_parameters(): shared.weight once)
      fp16/bf16 only: the (V, D) matrices (shared.weight, lm_head.weight) are stored as
      P.grad_rows.<hf name>   (R, D) F32 with the row ids in __metadata__["grad_rows"] (size budget)
      fp32.encoder_last_hidden_state (B, Ts, D) F32
    fp32: model in fp32, TF32 off, dropout off (model.eval(); gradients still computed).
    fp16 / bf16: the same fp32 model under torch.autocast("cuda", dtype) (HF AMP: fp32 master weights),
    loss.backward() outside autocast, no loss scaling (unscaled gradients).
  relpos.json       T5Attention._relative_position_bucket for rel in [-1024, 1024], bidirectional and causal,
                    for (num_buckets, max_distance) in (32,128), (64,256), (16,64); computed on CUDA, with the
                    CPU result compared (differences listed).
"""
import argparse
import copy
import json
import os
import sys

import torch


def log(*a):
    print(*a, flush=True)


def round_params_to_fp16(model):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())


def make_batch(V, seed):
    g = torch.Generator().manual_seed(seed)
    B, Ts, Tt = 3, 11, 7
    src_len = [11, 8, 5]
    tgt_len = [7, 5, 3]
    input_ids = torch.zeros(B, Ts, dtype=torch.long)
    attn = torch.zeros(B, Ts, dtype=torch.long)
    labels = torch.full((B, Tt), -100, dtype=torch.long)
    for b in range(B):
        n = src_len[b]
        input_ids[b, : n - 1] = torch.randint(2, 32100, (n - 1,), generator=g)
        input_ids[b, n - 1] = 1  # </s>
        attn[b, :n] = 1
        m = tgt_len[b]
        labels[b, : m - 1] = torch.randint(2, 32100, (m - 1,), generator=g)
        labels[b, m - 1] = 1
    # HF _shift_right: start token 0, labels shifted, -100 -> pad 0
    dec = torch.zeros_like(labels)
    dec[:, 1:] = labels[:, :-1]
    dec[dec == -100] = 0
    return dict(input_ids=input_ids, attention_mask=attn, labels=labels, decoder_input_ids=dec)


def run_reference(model, batch, dtype, dev):
    model.zero_grad(set_to_none=True)
    ids = batch["input_ids"].to(dev)
    am = batch["attention_mask"].to(dev)
    lab = batch["labels"].to(dev)
    if dtype is None:
        out = model(input_ids=ids, attention_mask=am, labels=lab, use_cache=False)
    else:
        with torch.autocast(device_type="cuda", dtype=dtype):
            out = model(input_ids=ids, attention_mask=am, labels=lab, use_cache=False)
    out.loss.backward()
    grads = {n: p.grad.detach().float().cpu().clone() for n, p in model.named_parameters()}
    return out.loss.detach().float().cpu(), out.logits.detach().float().cpu(), out.encoder_last_hidden_state.detach().float().cpu(), grads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="test/fixtures/t5")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    import safetensors
    import transformers
    from safetensors.torch import save_file
    from transformers import T5Config, T5ForConditionalGeneration
    from transformers.models.t5.modeling_t5 import T5Attention

    assert torch.cuda.is_available(), "needs a CUDA GPU"
    dev = torch.device("cuda")
    # strict fp32: no TF32 anywhere
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    versions = dict(torch=torch.__version__, transformers=transformers.__version__, safetensors=safetensors.__version__,
                    cuda=str(torch.version.cuda), gpu=torch.cuda.get_device_name(0), python=sys.version.split()[0])
    try:
        import apex  # noqa: F401
        versions["apex"] = "installed (HF may use FusedRMSNorm!)"
    except ImportError:
        versions["apex"] = "not installed (plain T5LayerNorm)"
    log("versions:", json.dumps(versions))
    os.makedirs(args.out, exist_ok=True)

    V = 32128
    shapes = {
        "tiny_v10": dict(vocab_size=V, d_model=8, d_kv=4, d_ff=16, num_layers=2, num_decoder_layers=2, num_heads=2,
                         feed_forward_proj="relu", tie_word_embeddings=True),
        "tiny_v11": dict(vocab_size=V, d_model=8, d_kv=4, d_ff=12, num_layers=2, num_decoder_layers=3, num_heads=3,
                         feed_forward_proj="gated-gelu", tie_word_embeddings=False),
    }
    batch = make_batch(V, args.seed)
    with open(os.path.join(args.out, "batch.json"), "w") as f:
        json.dump({k: v.tolist() for k, v in batch.items()}, f)
        f.write("\n")
    Tt = batch["labels"].shape[1]
    used = torch.cat([batch["input_ids"].flatten(), batch["decoder_input_ids"].flatten(),
                      batch["labels"][batch["labels"] >= 0].flatten()]).unique()
    grad_rows = sorted(set(used.tolist()) | set(range(0, 16)) | set(range(V - 16, V)))
    logits_rows = {"fp32": [0, 2 * Tt + 2], "fp16": [Tt + 1], "bf16": [Tt + 1]}

    summary = {}
    reload_notes = {}
    for mi, (name, kw) in enumerate(shapes.items()):
        torch.manual_seed(args.seed + mi)
        cfg = T5Config(dropout_rate=0.1, layer_norm_epsilon=1e-6, decoder_start_token_id=0, pad_token_id=0,
                       eos_token_id=1, **kw)
        try:
            cfg._attn_implementation = "eager"
        except Exception:
            pass
        model = T5ForConditionalGeneration(cfg).float()
        untied = not kw["tie_word_embeddings"]
        notes = {}
        if untied:
            # transformers 5.x forces config.tie_word_embeddings = True and keeps the v1.1 meaning only as
            # scale_decoder_outputs = False, so a fresh model has lm_head tied to shared. Real v1.1 / FLAN-T5
            # checkpoints have their own lm_head.weight: untie it explicitly (HF's init: N(0, factor * 1.0)).
            notes["tied_after_construction"] = model.lm_head.weight.data_ptr() == model.shared.weight.data_ptr()
            if notes["tied_after_construction"]:
                g = torch.Generator().manual_seed(args.seed + 100)
                model.lm_head.weight = torch.nn.Parameter(torch.randn(V, kw["d_model"], generator=g))
            model.config.tie_word_embeddings = False
            assert not getattr(model.config, "scale_decoder_outputs", False), "v1.1 must not scale"
            assert model.lm_head.weight.data_ptr() != model.shared.weight.data_ptr()
        round_params_to_fp16(model)  # the fp32 reference uses exactly the stored fp16 values
        # save the checkpoint the way users get them: save_pretrained, safetensors, fp16
        mdir = os.path.join(args.out, name)
        half = copy.deepcopy(model).half()
        half.save_pretrained(mdir)  # safetensors is the default
        for extra in ("generation_config.json",):
            p = os.path.join(mdir, extra)
            if os.path.exists(p):
                os.remove(p)
        from safetensors import safe_open
        from safetensors.torch import load_file
        stored = load_file(os.path.join(mdir, "model.safetensors"))
        if untied and "lm_head.weight" not in stored:
            # save_pretrained dropped the head as a "tied" key: write the same file ourselves
            notes["save_pretrained_dropped_lm_head"] = True
            sd = {n: t.detach().contiguous() for n, t in half.state_dict().items()
                  if n not in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")}
            save_file(sd, os.path.join(mdir, "model.safetensors"), metadata={"format": "pt"})
            stored = load_file(os.path.join(mdir, "model.safetensors"))
        # the stored values are exactly the model's (fp16-representable) parameters
        params = dict(model.named_parameters())
        for n, t in stored.items():
            ref = params[n] if n in params else model.state_dict()[n]
            assert t.dtype == torch.float16 and torch.equal(t.float(), ref.detach().float()), f"stored mismatch {n}"
        # reload through transformers and compare
        try:
            re = T5ForConditionalGeneration.from_pretrained(mdir, dtype=torch.float32)
        except TypeError:
            re = T5ForConditionalGeneration.from_pretrained(mdir, torch_dtype=torch.float32)
        sd_re = re.state_dict()
        mism = [n for n, p in model.state_dict().items() if not torch.equal(sd_re[n].float(), p.float())]
        notes["from_pretrained_mismatch"] = mism
        notes["from_pretrained_lm_head_is_shared"] = re.lm_head.weight.data_ptr() == re.shared.weight.data_ptr()
        notes["from_pretrained_scale_decoder_outputs"] = getattr(re.config, "scale_decoder_outputs", None)
        log(f"{name}: notes {notes}")
        if not untied:
            assert not mism, f"reload mismatch {mism}"
        reload_notes[name] = notes
        del re, half

        model = model.to(dev).eval()
        assert torch.equal(model._shift_right(batch["labels"].to(dev)).cpu(), batch["decoder_input_ids"]), "shift_right"
        tensors = {}
        meta = dict(versions)
        meta["model"] = name
        meta["grad_rows"] = ",".join(str(r) for r in grad_rows)
        meta["param_count"] = str(sum(p.numel() for p in model.parameters()))
        summary[name] = {}
        for prec, dt in (("fp32", None), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
            loss, logits, enc, grads = run_reference(model, batch, dt, dev)
            tensors[f"{prec}.loss"] = loss.reshape(())
            rows = logits_rows[prec]
            flat = logits.reshape(-1, logits.shape[-1])
            tensors[f"{prec}.logits"] = flat[rows].contiguous()
            meta[f"{prec}.logits_rows"] = ",".join(str(r) for r in rows)
            if prec == "fp32":
                tensors["fp32.encoder_last_hidden_state"] = enc.contiguous()
            for n, g in grads.items():
                if prec != "fp32" and g.dim() == 2 and g.shape[0] == V:
                    tensors[f"{prec}.grad_rows.{n}"] = g[grad_rows].contiguous()
                else:
                    tensors[f"{prec}.grad.{n}"] = g.contiguous()
            summary[name][prec] = float(loss)
            log(f"{name} {prec}: loss {float(loss):.9g}  |logits| max {logits.abs().max().item():.4g}")
        save_file(tensors, os.path.join(args.out, f"ref_{name}.safetensors"), metadata=meta)
        log(f"{name}: params", meta["param_count"], "grads", len(grads))
        with open(os.path.join(mdir, "config.json")) as f:
            log(f"{name} config.json:", f.read().replace("\n", " "))
        with safe_open(os.path.join(mdir, "model.safetensors"), "pt") as f:
            log(f"{name} checkpoint tensors:", sorted(f.keys()))
            log(f"{name} checkpoint metadata:", f.metadata())

    # relative position buckets, HF's own function, on CUDA (where the model computes it) and CPU
    rel = torch.arange(-1024, 1025, dtype=torch.long)
    cases = []
    for nb, md in ((32, 128), (64, 256), (16, 64)):
        for bidir in (True, False):
            b_cuda = T5Attention._relative_position_bucket(rel.to(dev), bidirectional=bidir, num_buckets=nb,
                                                           max_distance=md).cpu()
            b_cpu = T5Attention._relative_position_bucket(rel, bidirectional=bidir, num_buckets=nb, max_distance=md)
            diff = [int(r) for r, a, c in zip(rel.tolist(), b_cuda.tolist(), b_cpu.tolist()) if a != c]
            cases.append(dict(num_buckets=nb, max_distance=md, bidirectional=bidir, device="cuda",
                              buckets=b_cuda.tolist(), cpu_differs_at=diff))
            log(f"relpos nb={nb} md={md} bidir={bidir}: cuda vs cpu differ at {diff}")
    with open(os.path.join(args.out, "relpos.json"), "w") as f:
        json.dump(dict(rel_min=-1024, rel_max=1024, versions=versions, cases=cases), f, separators=(",", ":"))
        f.write("\n")
    with open(os.path.join(args.out, "versions.json"), "w") as f:
        json.dump(dict(versions=versions, seed=args.seed, losses=summary, reload_notes=reload_notes, grad_rows=grad_rows,
                       logits_rows=logits_rows), f, indent=1)
        f.write("\n")
    total = 0
    for root, _, files in os.walk(args.out):
        for fn in files:
            total += os.path.getsize(os.path.join(root, fn))
    log(f"total fixture bytes: {total}")


if __name__ == "__main__":
    main()
