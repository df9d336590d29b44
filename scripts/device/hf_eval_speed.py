#!/usr/bin/env python3
"""hf_eval_speed.py: the HF side of issue 29's evaluation speed line (scripts/device/eval_across_gpus.sh part hf_speed):
transformers' Seq2SeqTrainer.predict with predict_with_generate on newsdev2016, as run_translation.py --do_predict
--predict_with_generate runs it, under DeepSpeed ZeRO-3 ("ZeRO inference") or without DeepSpeed (DDP / one GPU).

    python3 hf_eval_speed.py prepare --spiece SPIECE_MODEL --work WORK
        WORK/tokenizer/ (spiece.model + tokenizer_config.json: transformers 5.x builds the T5 tokenizer with
        AutoTokenizer.from_pretrained on it; T5Tokenizer(vocab_file=...) maps every piece to <unk>) and
        WORK/ds_zero3_inference.json (below);
    torchrun --standalone --nproc_per_node N hf_eval_speed.py run --data DATA --tokenizer_dir WORK/tokenizer \
            --out DIR [--deepspeed WORK/ds_zero3_inference.json] [--model t5-3b|tiny|PATH] [--samples K] ...
    (or `deepspeed --num_gpus N hf_eval_speed.py run ...`: its --local_rank=N is dropped from argv, LOCAL_RANK is read)
        one predict: DIR/hf_eval_speed.json (rank 0) and one JSON line on stdout (rank 0);
    python3 hf_eval_speed.py tokenize --data DATA --tokenizer_dir WORK/tokenizer [--samples K] [--target]
        the first K sources (prefixed, truncated) or targets as run tokenizes them, one line of ids each (the format
        of `t5train tokenize`, for a diff);
    python3 hf_eval_speed.py table OUT [OUT...]
        the speed table of eval_across_gpus.sh's parts speed and hf_speed (several OUT folders: separate calls).

What is run_translation's: the sources are "translate English to Romanian: " + DATA/wmt16-ro-en/validation.en,
tokenized with truncation at --max_source_length (128), padding=False; the targets (validation.ro) tokenized with
text_target= and truncation at --max_target_length (128) as labels (so predict also computes predict_loss, as
run_translation's does on a test file with targets); DataCollatorForSeq2Seq(label_pad_token_id=-100); compute_metrics
(pad ids for -100, batch_decode, strip, sacrebleu.corpus_bleu when sacrebleu is importable, gen_len = mean count of
non-pad ids of a prediction); Seq2SeqTrainer.predict(test, metric_key_prefix="predict", max_length=GEN_LEN,
num_beams=1) with predict_with_generate=True, bf16=True, per_device_eval_batch_size 32. Under ZeRO-3 the
Seq2SeqTrainer passes synced_gpus=True to generate (every rank steps until the last rank's batch is done).

The model: --model t5-3b is T5Config with t5-3b's dimensions (d_model 1024, d_kv 128, d_ff 16384, 24+24 layers, 32
heads, vocab 32128, relu, tied embeddings; scripts/bench_t5_step_hf.py's PRESETS) built by the constructor
(transformers' _init_weights) after torch.manual_seed(--seed) on each rank's own device, fp32; every rank draws the same
weights (same seed, same device type). It is built BEFORE the Seq2SeqTrainingArguments, so transformers does not
see ZeRO-3 yet and does not wrap the construction in deepspeed.zero.Init (which would skip the init: no_init_weights);
DeepSpeed partitions the built module when the Trainer initializes the engine. --model tiny: a 2+2-layer d_model 64
T5 with the same vocabulary (the CPU smoke test). --model PATH: from_pretrained(PATH) (e.g. a checkpoint both sides
load, so both generate the same lengths).

ZeRO inference (transformers 5.x, integrations/deepspeed.py deepspeed_init(inference=True), called by
Trainer.evaluation_loop when no engine exists yet): requires ZeRO stage 3 ("ZeRO inference only makes sense with
ZeRO Stage 3"), deletes any "optimizer" / "scheduler" sections, and builds the engine with no optimizer (DeepSpeed's
DeepSpeedZeRoOffload: parameters partitioned, gathered per module in forward). The config written by prepare:
bf16 {"enabled": "auto"} (-> true from --bf16: DeepSpeed casts the module to bf16), zero_optimization stage 3 with
HF's "auto" bucket keys (filled from d_model by the Trainer: stage3_param_persistence_threshold = 10 * d_model^2,
so t5-3b's 1024 x 4096 attention matrices stay whole on every rank and the 1024 x 16384 FFN matrices and the
embedding are partitioned), and the batch keys "auto" (accelerate's prepare needs train_micro_batch_size_per_gpu
as an integer when no train dataloader is passed; the Trainer fills it from per_device_train_batch_size).
Without --deepspeed, bf16=True means autocast over fp32 weights (as run_translation --bf16); --bf16_full_eval casts
the model to bf16 first (TrainingArguments.bf16_full_eval).

Several ranks: Seq2SeqTrainer.predict gathers with accelerator.gather (not gather_for_metrics, transformers 5.17), so
the rows accelerate adds to fill every rank's last batch to the batch size (repeats from the start of the data) come
back with the real ones and go into compute_metrics (predict_gen_len, predict_bleu; predict_loss is the mean over
them all) and are generated like the others: that is HF's cost as it is. The written predictions are the first
`samples` rows (the real ones, in data order); prediction_rows_returned says how many came back.

Times: predict_runtime is the Trainer's own (Trainer.predict: time.time() from after get_test_dataloader to after
evaluation_loop, which includes deepspeed_init, every generate and the loss forward, the gathers across ranks, the
concatenation and compute_metrics, LESS model_preparation_time = the accelerator.prepare of the model, i.e.
DeepSpeed's engine construction and partitioning; rank 0's clock; predict_samples_per_second = num_samples /
predict_runtime). wall_predict_s is this script's time.time() around trainer.predict() after a barrier and a
device synchronize, on rank 0 (so it includes model preparation). Both are written.

Tried on a CPU host only (torch 2.15, transformers 5.17, DeepSpeed 0.19.8 with DS_ACCELERATOR=cpu, gloo), --model tiny
--device cpu --bf16 0, 8 / 16 / 40 sources: one process, 2 processes of DDP, 2 processes of ZeRO-3 (torchrun and the
deepspeed launcher): the same predictions; rank 0's ZeRO-3 partition half of the parameters. `tokenize` of all 1,999
sources and targets equals `./t5train tokenize` and test/fixtures/tokenizer/val.enro.{src,tgt}.128.ids. --model t5-3b
on the CPU, one process, fp32, 4 sources, --gen_len 16: ran (2,851,598,336 parameters; gen_len 11.25, one row empty).
Not run on a GPU; t5-3b not under DeepSpeed.
"""
import argparse
import json
import os
import sys
import time

from ds_adafactor_zero2 import read_pairs  # newsdev2016's first n pairs (0: all), same folder

T0 = time.time()
PRESETS = {  # d_model, d_kv, d_ff, layers, heads (scripts/bench_t5_step_hf.py)
    "t5-3b": (1024, 128, 16384, 24, 32),
    "tiny": (64, 16, 128, 2, 4),
}
PREFIX = "translate English to Romanian: "


def ds_zero3_inference():
    return {"bf16": {"enabled": "auto"},
            "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                                  "stage3_param_persistence_threshold": "auto"},
            "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "steps_per_print": 1000000000, "wall_clock_breakdown": False}


def cmd_prepare(a):
    import shutil
    tok = os.path.join(a.work, "tokenizer")
    os.makedirs(tok, exist_ok=True)
    shutil.copy(a.spiece, tok)
    with open(os.path.join(tok, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "T5Tokenizer", "model_max_length": 512, "extra_ids": 100}, f)
    with open(os.path.join(a.work, "ds_zero3_inference.json"), "w") as f:
        json.dump(ds_zero3_inference(), f, indent=1)
    print(f"prepare: {tok}/, {a.work}/ds_zero3_inference.json")




def build_model(a, device):
    import torch
    from transformers import T5Config, T5ForConditionalGeneration
    if a.model in PRESETS:
        d, dk, ff, L, H = PRESETS[a.model]
        cfg = T5Config(vocab_size=32128, d_model=d, d_kv=dk, d_ff=ff, num_layers=L, num_decoder_layers=L, num_heads=H,
                       relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.1,
                       layer_norm_epsilon=1e-6, initializer_factor=1.0, feed_forward_proj="relu",
                       tie_word_embeddings=True, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
        torch.manual_seed(a.seed)
        if device.type == "cuda":
            torch.cuda.manual_seed_all(a.seed)
        with torch.device(device):
            model = T5ForConditionalGeneration(cfg)
    else:
        model = T5ForConditionalGeneration.from_pretrained(a.model).to(device)
    model.eval()
    return model


def cmd_tokenize(a):
    """the first --samples sources as cmd_run tokenizes them, one line of space-separated ids each (the format of
    `t5train tokenize --tokenizer spiece.model --source_prefix S --max_length N`, for a diff)"""
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(a.tokenizer_dir)
    pairs = read_pairs(a.data, a.samples)
    if a.target:
        enc = tokenizer(text_target=[r for _, r in pairs], max_length=a.max_target_length, truncation=True)
    else:
        enc = tokenizer([PREFIX + s for s, _ in pairs], max_length=a.max_source_length, truncation=True)
    for ids in enc["input_ids"]:
        print(" ".join(map(str, ids)))


def cmd_table(a):
    """both sides' speed lines from OUT folders of eval_across_gpus.sh (t5-3b_<n>gpu/predict_results.json of part
    speed, hf_<mode>_<n>gpu/hf_eval_speed.json of part hf_speed; several folders: later ones fill what earlier ones
    lack): samples/s, the ratio to the same side's one GPU, and t5train's samples/s over this side's at each GPU count
    (samples/s, not runtime, since the two sides may have run different sample counts)"""
    import glob
    import re
    rows = {}  # side -> {n: (runtime, samples/s, gen_len, samples, wall)}
    for out in a.dirs:
        for f in sorted(glob.glob(os.path.join(out, "t5-3b_*gpu", "predict_results.json"))):
            n = int(re.search(r"t5-3b_(\d+)gpu", f).group(1))
            d = json.load(open(f))
            sps = d.get("predict_samples_per_second")
            if sps is None and d.get("predict_runtime"):
                sps = round(d.get("predict_samples", 1999) / d["predict_runtime"], 3)
            rows.setdefault("t5train", {}).setdefault(n, (d.get("predict_runtime"), sps, d.get("predict_gen_len"),
                                                          d.get("predict_samples"), None))
        for f in sorted(glob.glob(os.path.join(out, "hf_*_*gpu", "hf_eval_speed.json"))):
            m = re.search(r"hf_(\w+?)_(\d+)gpu", f)
            d = json.load(open(f))
            rows.setdefault("hf_" + m.group(1), {}).setdefault(int(m.group(2)), (
                d.get("predict_runtime"), d.get("predict_samples_per_second"), d.get("predict_gen_len"),
                d.get("samples"), d.get("wall_predict_s")))
    print("| side | GPUs | samples | predict_runtime (s) | samples/s | x its one GPU | gen_len | wall around predict (s) "
          "| t5train / this, samples/s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for side, r in rows.items():
        for n in sorted(r):
            rt, sps, gl, ns, wall = r[n]
            x = f"{sps / r[1][1]:.3f}" if 1 in r and sps and r[1][1] else ""
            vs = f"{rows['t5train'][n][1] / sps:.2f}" if side != "t5train" and n in rows.get("t5train", {}) \
                and sps and rows["t5train"][n][1] else ""
            print(f"| {side} | {n} | {ns} | {rt} | {sps} | {x} | {gl} | {'' if wall is None else wall} | {vs} |")
    if not rows:
        print("(no speed results in " + ", ".join(a.dirs) + ")")


def cmd_run(a):
    import numpy as np
    import torch
    import transformers
    from transformers import (AutoTokenizer, DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    import torch.distributed  # noqa: F401  (for is_initialized below)
    if a.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    tokenizer = AutoTokenizer.from_pretrained(a.tokenizer_dir)
    t = time.time()
    model = build_model(a, device)  # before the TrainingArguments: no zero.Init (see the top comment)
    init_s = time.time() - t
    n_params = sum(p.numel() for p in model.parameters())

    pairs = read_pairs(a.data, a.samples)
    enc = tokenizer([PREFIX + s for s, _ in pairs], max_length=a.max_source_length, padding=False, truncation=True)
    lab = tokenizer(text_target=[r for _, r in pairs], max_length=a.max_target_length, padding=False, truncation=True)
    test = [{"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i],
             "labels": lab["input_ids"][i]} for i in range(len(pairs))]

    args = Seq2SeqTrainingArguments(
        output_dir=a.out, do_predict=True, predict_with_generate=True, per_device_eval_batch_size=a.batch,
        per_device_train_batch_size=a.batch, bf16=a.bf16, bf16_full_eval=a.bf16_full_eval,
        generation_max_length=a.gen_len, generation_num_beams=1, report_to="none", seed=a.seed,
        deepspeed=a.deepspeed, use_cpu=(a.device == "cpu"), dataloader_num_workers=0, disable_tqdm=True)
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100, pad_to_multiple_of=None)
    try:
        import sacrebleu
    except ImportError:
        sacrebleu = None

    def compute_metrics(eval_preds):
        preds, labels = eval_preds
        if isinstance(preds, tuple):
            preds = preds[0]
        preds = np.where(preds != -100, preds, tokenizer.pad_token_id)
        out = {"gen_len": round(float(np.mean([np.count_nonzero(p != tokenizer.pad_token_id) for p in preds])), 4)}
        if sacrebleu is not None:
            hyp = [p.strip() for p in tokenizer.batch_decode(preds, skip_special_tokens=True)]
            labels = np.where(labels != -100, labels, tokenizer.pad_token_id)
            ref = [r.strip() for r in tokenizer.batch_decode(labels, skip_special_tokens=True)]
            out["bleu"] = round(sacrebleu.corpus_bleu(hyp, [ref]).score, 4)
        return out

    trainer = Seq2SeqTrainer(model=model, args=args, data_collator=collator, processing_class=tokenizer,
                             compute_metrics=compute_metrics)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.barrier()

    sync()
    t = time.time()
    res = trainer.predict(test, metric_key_prefix="predict", max_length=a.gen_len, num_beams=1)
    sync()
    wall = time.time() - t
    m = res.metrics
    if args.process_index != 0:
        return
    # Seq2SeqTrainer.predict (transformers 5.17) gathers with accelerator.gather, not gather_for_metrics: on several
    # ranks the rows accelerate added to even out the last batches (the last batch of every rank is filled to the
    # batch size from the start of the data) come back too, after the real rows, in data order; they are counted here
    # and cut (compute_metrics saw them: predict_gen_len / predict_bleu include them, as in HF)
    rows_returned = int(res.predictions.shape[0])
    preds = np.where(res.predictions != -100, res.predictions, tokenizer.pad_token_id)[:len(test)]
    texts = [p.strip() for p in tokenizer.batch_decode(preds, skip_special_tokens=True, clean_up_tokenization_spaces=True)]
    engine = trainer.model_wrapped
    # ZeRO-3: how much of the model rank 0 holds as its partition (ds_tensor), against the whole
    ds_params = [p for p in model.parameters() if hasattr(p, "ds_tensor")]
    partition = {"zero3_params": len(ds_params), "params": len(list(model.parameters())),
                 "rank0_partition_numel": sum(p.ds_tensor.numel() for p in ds_params),
                 "zero3_params_numel": sum(p.ds_numel for p in ds_params)} if ds_params else None
    summary = {
        "mode": "deepspeed_zero3" if a.deepspeed else ("ddp" if args.world_size > 1 else "single"),
        "world_size": args.world_size, "model": a.model, "parameters": n_params, "samples": len(test),
        "per_device_eval_batch_size": a.batch, "gen_len_max": a.gen_len, "bf16": a.bf16,
        "bf16_full_eval": a.bf16_full_eval, "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "predict_runtime": m.get("predict_runtime"), "predict_samples_per_second": m.get("predict_samples_per_second"),
        "predict_steps_per_second": m.get("predict_steps_per_second"),
        "predict_model_preparation_time": m.get("predict_model_preparation_time"),
        "predict_gen_len": m.get("predict_gen_len"), "predict_bleu": m.get("predict_bleu"),
        "predict_loss": m.get("predict_loss"), "wall_predict_s": round(wall, 4),
        "wall_samples_per_second": round(len(test) / wall, 3) if wall else None,
        "prediction_rows_returned": rows_returned, "model_init_s": round(init_s, 3), "process_s": round(time.time() - T0, 3),
        "engine": f"{type(engine).__module__}.{type(engine).__name__}",
        "engine_optimizer": type(getattr(engine, "optimizer", None)).__name__, "zero3_partition": partition,
        "ds_config": args.hf_deepspeed_config.config if a.deepspeed else None,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "max_memory_allocated_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
        if device.type == "cuda" else None,
        "first_input_ids": test[0]["input_ids"], "metrics": m,
    }
    if a.deepspeed:
        import deepspeed
        summary["deepspeed"] = deepspeed.__version__
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "generated_predictions.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(texts))
    with open(os.path.join(a.out, "hf_eval_speed.json"), "w") as f:
        json.dump(dict(summary, predictions=texts), f, indent=1, default=str)
    line = {k: summary[k] for k in ("mode", "world_size", "model", "samples", "predict_runtime",
                                    "predict_samples_per_second", "predict_model_preparation_time",
                                    "wall_predict_s", "predict_gen_len", "predict_bleu", "predict_loss",
                                    "prediction_rows_returned", "model_init_s", "max_memory_allocated_gib", "engine")}
    print("hf_eval_speed:", json.dumps(line), flush=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--spiece", required=True)
    p.add_argument("--work", required=True)
    r = sub.add_parser("run")
    r.add_argument("--data", required=True, help="the folder holding wmt16-ro-en/validation.{en,ro}")
    r.add_argument("--tokenizer_dir", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--deepspeed", default=None, help="a DeepSpeed config (ZeRO-3: ZeRO inference); none: DDP / 1 GPU")
    r.add_argument("--model", default="t5-3b", help="t5-3b | tiny (random weights) | a checkpoint folder")
    r.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    r.add_argument("--samples", type=int, default=0, help="the first K pairs (0: all 1,999)")
    r.add_argument("--gen_len", type=int, default=64)
    r.add_argument("--batch", type=int, default=32)
    r.add_argument("--max_source_length", type=int, default=128)
    r.add_argument("--max_target_length", type=int, default=128)
    r.add_argument("--seed", type=int, default=11)
    r.add_argument("--bf16", type=int, default=1)
    r.add_argument("--bf16_full_eval", type=int, default=0)
    k = sub.add_parser("tokenize")
    for q in (k,):
        q.add_argument("--data", required=True)
        q.add_argument("--tokenizer_dir", required=True)
        q.add_argument("--samples", type=int, default=8)
        q.add_argument("--max_source_length", type=int, default=128)
        q.add_argument("--max_target_length", type=int, default=128)
        q.add_argument("--target", action="store_true", help="the targets (validation.ro) instead of the sources")
    tb = sub.add_parser("table")
    tb.add_argument("dirs", nargs="+")
    # the deepspeed launcher puts --local_rank=N right after the script, before the subcommand; LOCAL_RANK (which it
    # also sets) is what is read
    argv, skip = [], False
    for x in sys.argv[1:]:
        if skip:
            skip = False
        elif x.startswith("--local_rank=") or x.startswith("--local-rank="):
            pass
        elif x in ("--local_rank", "--local-rank"):
            skip = True
        else:
            argv.append(x)
    a = ap.parse_args(argv)
    a.bf16 = bool(getattr(a, "bf16", 0))
    a.bf16_full_eval = bool(getattr(a, "bf16_full_eval", 0))
    if a.cmd == "prepare":
        cmd_prepare(a)
    elif a.cmd == "table":
        cmd_table(a)
    elif a.cmd == "tokenize":
        cmd_tokenize(a)
    else:
        cmd_run(a)


if __name__ == "__main__":
    main()
