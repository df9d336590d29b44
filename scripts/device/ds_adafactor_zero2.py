#!/usr/bin/env python3
"""ds_adafactor_zero2.py: the Python half of scripts/device/ds_adafactor_zero2.sh (issue 33: what DeepSpeed + HF Trainer
does with `--adafactor` at ZeRO-2 on 2 GPUs, beside t5train and transformers' single-GPU Adafactor). Three commands:

    python3 ds_adafactor_zero2.py prepare --data DATA --work WORK
        WORK/tokenizer/ (spiece.model + tokenizer_config.json: transformers 5.x builds the T5 tokenizer with
        AutoTokenizer.from_pretrained on it; T5Tokenizer(vocab_file=...) maps every piece to <unk>) and
        WORK/ds_zero2.json (stage 2, fp32, no "optimizer" / "scheduler" section: the Trainer's Adafactor and linear
        schedule are DeepSpeed's client optimizer and scheduler; the batch keys "auto");
    [torchrun --standalone --nproc_per_node 2] python3 ds_adafactor_zero2.py hf --model M --tokenizer_dir T \
            --batches B.json --data DATA --out DIR --ga N [--deepspeed WORK/ds_zero2.json]
        one HF Seq2SeqTrainer run, optim="adafactor" (HF Trainer's Adafactor: scale_parameter and relative_step off,
        lr from the linear schedule), fp32, TF32 off, dropout 0, micro-batch 2, 30 updates, lr 1e-3, logging every step;
    python3 ds_adafactor_zero2.py compare --work WORK --out OUT
        the per-step table and the summary (OUT/ds_adafactor_zero2.json, OUT/losses.tsv, stdout).

The data: t5train's own rows. t5train's epoch order is its own RNG's, not torch's (docs/data.md), so the HF runs replay
the rows t5train trained on: `t5train --dump_batches` of the one-GPU run (micro-batch 2 x accumulation 2) gives, per
update, its two micro-batches of two rows; the HF runs read them in that order with a SequentialSampler. HF's
micro-batch k is then rows 2k, 2k+1: on one GPU with accumulation 2 update u holds micro-batches 2u, 2u+1; on two ranks
accelerate's BatchSamplerShard gives rank r the batches r, r+2, ..., so update u holds the same two micro-batches, one
per rank. Both HF runs therefore see exactly the same micro-batches (same rows, same padding), which is why the
one-GPU reference uses accumulation 2 and not micro-batch 4. t5train on two ranks splits the same four rows of each
update the other way (rank r takes positions r, r+2 of the permutation); every target of the first 64 pairs is longer
than 8 tokens, so every row has 8 label tokens and the mean of the micro-batch means is the same quantity. The rows
are checked against transformers' tokenization of the first 64 pairs (the same tokenizer; no source prefix).

The loss compared is the mean of the micro-batch means over the update (and over the ranks), taken in full precision
from compute_loss (HF's logged "loss" is rounded to 4 digits); trainer.model_accepts_loss_kwargs is set False so that
the Trainer averages the micro-batches instead of summing them (transformers 5.17 passes num_items_in_batch to T5,
which ignores it: test/bench/long_run/settings.py ga4_bf16_hf_mean). What DeepSpeed's Adafactor sees: each rank writes
DIR/adafactor_view_rank<R>.json, the tensors in the base optimizer's param_groups after deepspeed.initialize (ZeRO-2
replaces each group's params by the rank's flat 1-D fp32 partition) and Adafactor's state after step 1 (which of them
got a factored second moment: exp_avg_sq_row / exp_avg_sq_col, or a full exp_avg_sq).

Needs: torch, transformers 5.x, accelerate, sentencepiece, safetensors; DeepSpeed for --deepspeed (the .sh installs
the carried .whl into WORK/site and puts it on PYTHONPATH for that run only).
Tried on a CPU host (torch 2.11.0, transformers 5.17.0, DeepSpeed 0.19.8 with DS_ACCELERATOR=cpu, gloo), the HF
runs only, on a dump built from transformers' tokenization: b ran as written; two ranks of plain DDP (the Trainer
forced to gloo) gave b's losses within 9e-8 relative at every step (so the replay and the shard order hold); a ran
end to end, its Adafactor holding 2 flat 1-D tensors per rank.
"""
import argparse
import collections
import json
import math
import os
import sys
import time

T0 = time.time()
STEPS = 30
LR = 1e-3
SEED = 7
BATCH = 2
MAX_SOURCE, MAX_TARGET, PAIRS = 48, 8, 64
RUNS = {  # name -> (folder under WORK, description)
    "a": ("hf_ds_zero2_2gpu", "HF Trainer + DeepSpeed ZeRO-2, 2 GPUs x 2"),
    "b": ("hf_1gpu_ga2", "HF Trainer, 1 GPU x 2 x accumulation 2 (reference)"),
    "c": ("t5train_zero2_2gpu", "t5train --num_gpus 2, ZeRO-2, 2 GPUs x 2"),
    "d": ("t5train_1gpu_ga2", "t5train, 1 GPU x 2 x accumulation 2 (its batches replayed by a, b)"),
}


def log(*a):
    print(f"[{time.time() - T0:6.1f} s]", *a, flush=True)


# ---------------------------------------------------------------- prepare

def ds_config():
    return {"zero_optimization": {"stage": 2}, "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
            "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 1000000,
            "wall_clock_breakdown": False}


def cmd_prepare(a):
    import shutil
    tok = os.path.join(a.work, "tokenizer")
    os.makedirs(tok, exist_ok=True)
    shutil.copy(os.path.join(a.data, "t5-spiece", "spiece.model"), tok)
    with open(os.path.join(tok, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "T5Tokenizer", "model_max_length": 512, "extra_ids": 100}, f)
    with open(os.path.join(a.work, "ds_zero2.json"), "w") as f:
        json.dump(ds_config(), f, indent=1)
    print(f"prepare: {tok}/, {a.work}/ds_zero2.json")


# ---------------------------------------------------------------- hf

def rows_from_dump(path):
    """t5train's --dump_batches file (per update: its micro-batches {input_ids, attention_mask, labels}, padded) as one
    list of unpadded rows in training order, and the rows per update"""
    with open(path) as f:
        updates = json.load(f)
    rows, per_update = [], set()
    for micro in updates:
        n = 0
        for mb in micro:
            for ids, mask, lab in zip(mb["input_ids"], mb["attention_mask"], mb["labels"]):
                rows.append({"input_ids": [t for t, m in zip(ids, mask) if m],
                             "attention_mask": [1] * sum(1 for m in mask if m),
                             "labels": [t for t in lab if t != -100]})
                n += 1
        per_update.add(n)
    return rows, len(updates), sorted(per_update)


def read_pairs(data, n):
    out = []
    with open(os.path.join(data, "wmt16-ro-en", "validation.en"), encoding="utf-8") as fe, \
            open(os.path.join(data, "wmt16-ro-en", "validation.ro"), encoding="utf-8") as fr:
        for en, ro in zip(fe, fr):
            out.append((en.rstrip("\n"), ro.rstrip("\n")))
            if len(out) == n:
                break
    return out


def tokenization_check(tokenizer, rows, pairs):
    """how many of t5train's rows are one of transformers' tokenized pairs (run_translation's preprocessing: no
    prefix, truncation to the max lengths); and how many label rows are shorter than MAX_TARGET"""
    enc = tokenizer([s for s, _ in pairs], max_length=MAX_SOURCE, truncation=True)
    lab = tokenizer(text_target=[t for _, t in pairs], max_length=MAX_TARGET, truncation=True)
    hf = {(tuple(enc["input_ids"][i]), tuple(lab["input_ids"][i])) for i in range(len(pairs))}
    found = sum(1 for r in rows if (tuple(r["input_ids"]), tuple(r["labels"])) in hf)
    short = sum(1 for r in rows if len(r["labels"]) < MAX_TARGET)
    return {"rows": len(rows), "rows_equal_to_hf_tokenization": found, "hf_pairs": len(pairs),
            "label_rows_shorter_than_max_target": short}


def optimizer_view(trainer, torch):
    """the Adafactor the Trainer (or DeepSpeed) steps, found along the .optimizer chain, and what it holds"""
    chain, seen, base = [], set(), None
    for start in (trainer.optimizer, getattr(trainer.model_wrapped, "optimizer", None)):
        o = start
        while o is not None and id(o) not in seen:
            seen.add(id(o))
            chain.append(f"{type(o).__module__}.{type(o).__name__}")
            if type(o).__name__ == "Adafactor":
                base = base or o
                break
            o = getattr(o, "optimizer", None)
    view = {"chain": chain}
    if base is None:
        view["error"] = "no Adafactor along the optimizer chain"
        return view
    groups, dims, factored, unfactored, numel = [], collections.Counter(), 0, 0, 0
    for g in base.param_groups:
        ps = []
        for p in g["params"]:
            st = base.state.get(p, {})
            desc = {"shape": list(p.shape), "numel": p.numel(), "dtype": str(p.dtype).replace("torch.", "")}
            if st:
                desc["state"] = {k: (list(v.shape) if torch.is_tensor(v) and v.dim() else
                                     (v.item() if torch.is_tensor(v) else v)) for k, v in st.items()}
                if "exp_avg_sq_row" in st:
                    factored += 1
                elif "exp_avg_sq" in st:
                    unfactored += 1
            dims[f"{p.dim()}-D"] += 1
            numel += p.numel()
            ps.append(desc)
        groups.append({k: g.get(k) for k in ("lr", "weight_decay", "scale_parameter", "relative_step", "beta1",
                                              "clip_threshold", "warmup_init")} | {"params": ps})
    view.update({"tensors": sum(dims.values()), "by_dims": dict(sorted(dims.items())), "numel": numel,
                 "second_moment_factored": factored, "second_moment_full": unfactored, "groups": groups})
    return view


def cmd_hf(a):
    import torch
    import torch.distributed as dist
    import transformers
    from torch.utils.data import SequentialSampler
    from transformers import (AutoTokenizer, DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments,
                              T5ForConditionalGeneration, TrainerCallback, set_seed)

    # fp32 without TF32, as scripts/trajectory_parity.py (t5train's default: --tf32 off)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    args = Seq2SeqTrainingArguments(
        output_dir=a.out, per_device_train_batch_size=BATCH, gradient_accumulation_steps=a.ga, max_steps=STEPS,
        learning_rate=LR, optim="adafactor", logging_steps=1, save_strategy="no", report_to="none",
        disable_tqdm=True, seed=SEED, dataloader_num_workers=0, deepspeed=a.deepspeed)
    set_seed(SEED)
    rank, world = args.process_index, args.world_size
    main = rank == 0
    os.makedirs(a.out, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(a.tokenizer_dir)
    # the fixture is stored in fp16: loaded as fp32 (exact), as t5train's fp32 master
    model = T5ForConditionalGeneration.from_pretrained(a.model, dropout_rate=0.0, dtype=torch.float32).float()
    rows, n_updates, per_update = rows_from_dump(a.batches)
    if n_updates < STEPS or per_update != [2 * BATCH]:
        raise SystemExit(f"hf: {a.batches} holds {n_updates} updates of {per_update} rows; {STEPS} of "
                         f"{2 * BATCH} needed")
    rows = rows[:STEPS * 2 * BATCH]
    check = tokenization_check(tokenizer, rows, read_pairs(a.data, PAIRS))
    if main:
        log(f"hf: rank 0 of {world}, accumulation {a.ga}, deepspeed {a.deepspeed}; {len(rows)} rows from t5train's "
            f"dump; tokenization check {check}")
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)

    class Trainer(Seq2SeqTrainer):
        micro = []  # this update's micro-batch losses on this rank (fp32 scalars, before any division)

        def _get_train_sampler(self, train_dataset=None, *x, **k):
            return SequentialSampler(train_dataset if train_dataset is not None else self.train_dataset)

        def compute_loss(self, model, inputs, *x, **k):
            r = super().compute_loss(model, inputs, *x, **k)
            self.micro.append((r[0] if isinstance(r, tuple) else r).detach().float())
            return r

    views = {}
    logf = open(os.path.join(a.out, "trainer_log.jsonl"), "w") if main else None

    def write_view():
        with open(os.path.join(a.out, f"adafactor_view_rank{rank}.json"), "w") as f:
            json.dump(views, f, indent=1, default=str)

    class Probe(TrainerCallback):
        rows = {}  # step -> the row, written once both its loss (on_step_end) and HF's log line (on_log) are in

        def emit(self, step):
            r = self.rows.get(step, {})
            if logf is not None and "loss" in r and "hf_logged_loss" in r:
                logf.write(json.dumps(self.rows.pop(step)) + "\n")
                logf.flush()

        def on_train_begin(self, targs, state, control, **kw):
            views["after_init"] = optimizer_view(trainer, torch)
            write_view()
            v = views["after_init"]
            log(f"hf rank {rank}: Adafactor after init: {v.get('tensors')} tensors {v.get('by_dims')}, "
                f"{v.get('numel')} elements; chain {' -> '.join(v['chain'])}")

        def on_step_end(self, targs, state, control, **kw):
            t = torch.stack(trainer.micro).double().mean() if trainer.micro else torch.tensor(float("nan"))
            n_micro = len(trainer.micro)
            trainer.micro.clear()
            if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                t = t.to(targs.device)
                dist.all_reduce(t)
                t = t / dist.get_world_size()
            self.rows.setdefault(state.global_step, {}).update(
                {"step": state.global_step, "loss": float(t), "micro_batches": n_micro, "max_steps": state.max_steps})
            self.emit(state.global_step)
            if state.global_step == 1:
                views["after_step_1"] = optimizer_view(trainer, torch)
                write_view()
                v = views["after_step_1"]
                log(f"hf rank {rank}: Adafactor after step 1: {v.get('tensors')} tensors {v.get('by_dims')}, "
                    f"second moment factored for {v.get('second_moment_factored')}, full for "
                    f"{v.get('second_moment_full')}")

        def on_log(self, targs, state, control, logs=None, **kw):
            if not logs or "loss" not in logs:
                return
            gn = logs.get("grad_norm")
            self.rows.setdefault(state.global_step, {}).update(
                {"hf_logged_loss": logs["loss"], "grad_norm": None if gn is None else float(gn),
                 "learning_rate": logs.get("learning_rate")})
            self.emit(state.global_step)

    probe = Probe()
    trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=collator, processing_class=tokenizer,
                      callbacks=[probe])
    trainer.model_accepts_loss_kwargs = False  # the mean of the micro-batch means (see the top)
    res = trainer.train()
    summary = {"argv": sys.argv[1:], "torch": torch.__version__, "transformers": transformers.__version__,
               "world_size": world, "gradient_accumulation_steps": a.ga, "global_step": trainer.state.global_step,
               "train_loss": res.metrics.get("train_loss"), "tokenization_check": check,
               "attn_implementation": getattr(model.config, "_attn_implementation", None), "wall_s": time.time() - T0}
    if a.deepspeed:
        import deepspeed
        summary["deepspeed"] = deepspeed.__version__
    if main:
        from safetensors.torch import save_file
        m = trainer.accelerator.unwrap_model(trainer.model)
        save_file({n: p.detach().float().cpu().contiguous() for n, p in m.named_parameters()},
                  os.path.join(a.out, "final_weights.safetensors"))
        with open(os.path.join(a.out, "run_summary.json"), "w") as f:
            json.dump(summary, f, indent=1, default=str)
        log(f"hf: done, {trainer.state.global_step} steps, train_loss {summary['train_loss']}")
        logf.close()


# ---------------------------------------------------------------- compare

def read_losses(d):
    out = {}
    try:
        with open(os.path.join(d, "trainer_log.jsonl")) as f:
            for line in f:
                r = json.loads(line)
                if "max_steps" in r and r.get("loss") is not None:
                    out[int(r["step"])] = r
    except OSError:
        pass
    return out


def rel(x, ref):
    if x is None or ref is None:
        return None
    return abs(x - ref) / max(abs(ref), 1e-30)


def weights_rel_l2(path, ref_path):
    """relative L2 of a model's weights against the reference's over the names both hold"""
    try:
        from safetensors.numpy import load_file
        x, r = load_file(path), load_file(ref_path)
    except Exception as e:  # noqa: BLE001 (a missing or unreadable file is reported, not fatal)
        return {"error": f"{type(e).__name__}: {e}"}
    names = sorted(set(x) & set(r))
    if not names:
        return {"error": f"no tensor name in common ({len(x)} and {len(r)} tensors)"}
    d2 = n2 = 0.0
    worst = (0.0, None)
    for n in names:
        a, b = x[n].astype("float64"), r[n].astype("float64")
        if a.shape != b.shape:
            return {"error": f"{n}: shape {a.shape} against {b.shape}"}
        td, tn = float(((a - b) ** 2).sum()), float((b ** 2).sum())
        d2, n2 = d2 + td, n2 + tn
        w = math.sqrt(td / max(tn, 1e-300))
        if w > worst[0]:
            worst = (w, n)
    return {"rel_l2": math.sqrt(d2 / max(n2, 1e-300)), "tensors": len(names), "worst_tensor": worst[1],
            "worst_tensor_rel_l2": worst[0]}


def view_summary(d):
    out = {}
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if name.startswith("adafactor_view_rank") and name.endswith(".json"):
            with open(os.path.join(d, name)) as f:
                v = json.load(f)
            r = name[len("adafactor_view_rank"):-len(".json")]
            s1, s0 = v.get("after_step_1", {}), v.get("after_init", {})
            steps = sorted({p.get("state", {}).get("step") for g in s1.get("groups", []) for p in g["params"]} - {None})
            out[f"rank{r}"] = {"tensors": s0.get("tensors"), "by_dims": s0.get("by_dims"), "numel": s0.get("numel"),
                               "shapes": [p["shape"] for g in s0.get("groups", []) for p in g["params"]][:8],
                               "second_moment_factored": s1.get("second_moment_factored"),
                               "second_moment_full": s1.get("second_moment_full"),
                               "adafactor_step_after_update_1": steps, "chain": s0.get("chain")}
    return out


def cmd_compare(a):
    os.makedirs(a.out, exist_ok=True)
    dirs = {k: os.path.join(a.work, v[0]) for k, v in RUNS.items()}
    L = {k: read_losses(d) for k, d in dirs.items()}
    status = {}
    try:
        with open(os.path.join(a.work, "status.txt")) as f:
            for line in f:
                p = line.split()
                if len(p) >= 3:
                    status[p[0]] = {"rc": int(p[1]), "seconds": int(p[2])}
    except OSError:
        pass
    ref = L["b"]
    table, worst = [], {k: (0.0, None) for k in "acd"}
    lines = ["step\tloss_a_hf_ds_zero2\tloss_b_hf_1gpu\tloss_c_t5train_zero2\tloss_d_t5train_1gpu\trel_a\trel_c\trel_d"
             "\tgrad_norm_a\tgrad_norm_b\tgrad_norm_c\tgrad_norm_d"]
    for s in range(1, STEPS + 1):
        row = {"step": s}
        for k in "abcd":
            r = L[k].get(s, {})
            row[f"loss_{k}"], row[f"grad_norm_{k}"] = r.get("loss"), r.get("grad_norm")
        for k in "acd":
            row[f"rel_{k}"] = rel(row[f"loss_{k}"], row["loss_b"])
            if row[f"rel_{k}"] is not None and row[f"rel_{k}"] >= worst[k][0]:
                worst[k] = (row[f"rel_{k}"], s)
        table.append(row)
        f = lambda v: "" if v is None else f"{v:.9g}"  # noqa: E731
        lines.append("\t".join([str(s)] + [f(row[f"loss_{k}"]) for k in "abcd"] + [f(row[f"rel_{k}"]) for k in "acd"]
                               + [f(row[f"grad_norm_{k}"]) for k in "abcd"]))
    with open(os.path.join(a.out, "losses.tsv"), "w") as fo:
        fo.write("\n".join(lines) + "\n")
    weights = {k: weights_rel_l2(os.path.join(dirs[k], "final_weights.safetensors" if k == "a" else "model.safetensors"),
                                 os.path.join(dirs["b"], "final_weights.safetensors")) for k in "acd"}
    views = {k: view_summary(dirs[k]) for k in "ab"}
    t5_split = None
    try:
        with open(os.path.join(a.work, "t5train_zero2_2gpu.log"), errors="replace") as fl:
            t5_split = next((ln.strip() for ln in fl if "Adafactor on 2 ranks" in ln), None)
    except OSError:
        pass
    tok = None
    try:
        with open(os.path.join(dirs["b"], "run_summary.json")) as fs:
            tok = json.load(fs).get("tokenization_check")
    except OSError:
        pass
    first = table[0]
    summary = {
        "runs": {k: {"dir": RUNS[k][0], "what": RUNS[k][1], "steps_logged": len(L[k]), **status.get(k, {})}
                 for k in "abcd"},
        "setup": {"model": "test/fixtures/t5/tiny_v10 (fp16 on disk, trained in fp32)", "pairs": PAIRS,
                  "max_source_length": MAX_SOURCE, "max_target_length": MAX_TARGET, "global_batch": 4, "steps": STEPS,
                  "lr": LR, "schedule": "linear, no warm-up", "seed": SEED, "dropout": 0, "max_grad_norm": 1.0,
                  "optimizer": "HF Trainer's Adafactor (optim adafactor: scale_parameter, relative_step off)",
                  "deepspeed_config": ds_config()},
        "tokenization_check": tok,
        "step_1": {"loss": {k: first[f"loss_{k}"] for k in "abcd"},
                   "loss_rel_vs_b": {k: first[f"rel_{k}"] for k in "acd"},
                   "grad_norm": {k: first[f"grad_norm_{k}"] for k in "abcd"}},
        "max_rel_loss_diff_vs_b": {k: {"value": worst[k][0] if worst[k][1] else None, "at_step": worst[k][1]}
                                   for k in "acd"},
        "final_loss": {k: table[-1][f"loss_{k}"] for k in "abcd"},
        "final_weights_vs_b": weights,
        "adafactor_view": views,
        "t5train_split_line": t5_split,
        "per_step": table,
    }
    with open(os.path.join(a.out, "ds_adafactor_zero2.json"), "w") as fo:
        json.dump(summary, fo, indent=1, default=str)
    # stdout: the table and the summary
    print("step  a: HF+DS ZeRO-2 2 GPUs   b: HF 1 GPU ga2 (ref)   c: t5train ZeRO-2 2 GPUs   d: t5train 1 GPU ga2"
          "   rel a / c / d vs b")
    g = lambda v, w=14: ("-" if v is None else f"{v:.8f}").rjust(w)  # noqa: E731
    e = lambda v: "-" if v is None else f"{v:.2e}"  # noqa: E731
    for r in table:
        print(f"{r['step']:4d} {g(r['loss_a'], 22)} {g(r['loss_b'], 23)} {g(r['loss_c'], 26)} {g(r['loss_d'], 22)}"
              f"   {e(r['rel_a'])} / {e(r['rel_c'])} / {e(r['rel_d'])}")
    print("== summary")
    for k in "abcd":
        rr = summary["runs"][k]
        print(f"run {k} ({rr['what']}): {rr['steps_logged']} steps logged, rc {rr.get('rc', '?')}, "
              f"{rr.get('seconds', '?')} s")
    print(f"t5train's rows against transformers' tokenization: {tok}")
    print(f"step 1 (same weights, same rows): loss rel vs b {summary['step_1']['loss_rel_vs_b']}; grad_norm "
          f"{summary['step_1']['grad_norm']}")
    for k in "acd":
        w = summary["max_rel_loss_diff_vs_b"][k]
        wt = weights[k]
        print(f"{k} vs b: max rel loss diff {e(w['value'])} at step {w['at_step']}; final weights rel L2 "
              f"{e(wt.get('rel_l2')) if 'rel_l2' in wt else wt.get('error')}")
    for k in "ab":
        for r, v in views[k].items():
            print(f"{k} {r}: Adafactor holds {v['tensors']} tensors {v['by_dims']} ({v['numel']} elements; first "
                  f"shapes {v['shapes']}); second moment factored {v['second_moment_factored']}, full "
                  f"{v['second_moment_full']}; Adafactor step after update 1: {v['adafactor_step_after_update_1']}")
    print(f"c: {t5_split or 'no line with Adafactor on 2 ranks in its log'}")
    print(f"written: {a.out}/ds_adafactor_zero2.json, {a.out}/losses.tsv")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--data", required=True)
    p.add_argument("--work", required=True)
    p = sub.add_parser("hf")
    p.add_argument("--model", required=True)
    p.add_argument("--tokenizer_dir", required=True)
    p.add_argument("--batches", required=True, help="t5train --dump_batches file of the one-GPU run")
    p.add_argument("--data", required=True, help="folder holding wmt16-ro-en/ (the tokenization check)")
    p.add_argument("--out", required=True)
    p.add_argument("--ga", type=int, required=True)
    p.add_argument("--deepspeed", default=None)
    p.add_argument("--local_rank", type=int, default=None, help="(the deepspeed launcher's; unused)")
    p = sub.add_parser("compare")
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    a = ap.parse_args()
    {"prepare": cmd_prepare, "hf": cmd_hf, "compare": cmd_compare}[a.cmd](a)


if __name__ == "__main__":
    main()
