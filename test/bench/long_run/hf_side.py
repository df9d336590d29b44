#!/usr/bin/env python3
"""hf_side.py: the HF side of the long-run comparison (issue 27): transformers' Seq2SeqTrainer driven as
examples/pytorch/translation/run_translation.py drives it, with the same flags t5train takes.

    python3 test/bench/long_run/hf_side.py --model_name_or_path INIT --tokenizer_name TOKDIR \
        --train_file train.jsonl --validation_file validation.jsonl --source_lang en --target_lang ro \
        --source_prefix "translate English to Romanian: " --max_source_length 128 --max_target_length 128 \
        --output_dir OUT --do_train --do_eval --max_steps 3000 --learning_rate 5e-4 --warmup_steps 500 \
        --per_device_train_batch_size 32 --per_device_eval_batch_size 64 --eval_strategy steps --eval_steps 250 \
        --logging_steps 50 --save_strategy no --report_to none --seed 1 [--bf16 | --fp16 --deepspeed ds.json]

What is run_translation's: the preprocessing (prefix + source, tokenizer(inputs, max_length, truncation=True),
tokenizer(text_target=targets, ...) as labels, padding=False), DataCollatorForSeq2Seq with label_pad_token_id
-100 and pad_to_multiple_of 8 under fp16, compute_metrics (pad ids for -100, batch_decode, strip, corpus BLEU
with sacrebleu's defaults: `evaluate`'s "sacrebleu" metric is sacrebleu.corpus_bleu, not installed on the
device), gen_len. What is not: the data come from JSON-lines files read here (the `datasets` package is not
on the device) as a list of examples, which the Trainer samples as it would a Dataset; --dropout_rate
overrides the checkpoint's as t5train's flag does.

Writes OUT/trainer_log.jsonl in t5train's line format (step lines {"step", "loss", "learning_rate",
"grad_norm", "max_steps"}, eval lines {"step", "eval_loss", ["eval_bleu", "eval_gen_len"]}) so that the
same reader takes both, and OUT/run_summary.json: wall-clock from process start to the end (evaluation
included), train_runtime, samples/s end to end, DeepSpeed's skipped steps (fp16) and the versions.
"""
import dataclasses
import json
import os
import sys
import time
from typing import Optional

T_START = time.time()


@dataclasses.dataclass
class DataArgs:
    model_name_or_path: str = ""
    tokenizer_name: Optional[str] = None
    train_file: Optional[str] = None
    validation_file: Optional[str] = None
    source_lang: str = "en"
    target_lang: str = "ro"
    source_prefix: str = ""
    max_source_length: int = 1024
    max_target_length: int = 128
    max_train_samples: Optional[int] = None
    max_eval_samples: Optional[int] = None
    ignore_pad_token_for_loss: bool = True
    dropout_rate: Optional[float] = None
    # false: the Trainer divides each micro-batch's loss by gradient_accumulation_steps and does not multiply it by
    # the number of processes (transformers < 4.46 semantics, DeepSpeed's and t5train's); None: as the Trainer decides
    hf_model_accepts_loss_kwargs: Optional[bool] = None
    # transformers' attention implementation for T5 ("eager", "sdpa"; None: transformers' default)
    attn_implementation: Optional[str] = None
    # T5's own Adafactor, as transformers' Adafactor docs give it for T5: Adafactor(scale_parameter=True,
    # relative_step=True, warmup_init=False, lr=None) with AdafactorSchedule, handed to the Trainer as its optimizers
    # (--optim adafactor makes the Trainer's Adafactor with scale_parameter and relative_step False)
    hf_adafactor_t5: bool = False
    # Adafactor with scale_parameter=True, relative_step=False, lr=--learning_rate: updates relative to each
    # parameter's RMS under the Trainer's own schedule (linear with warm-up); t5train's --optim adafactor
    # --adafactor_scale_parameter true
    hf_adafactor_scale: bool = False


def read_jsonl(path, src, tgt, limit):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                t = json.loads(line)["translation"]
                out.append((t[src], t[tgt]))
                if limit is not None and len(out) >= limit:
                    break
    return out


def main():
    import numpy as np
    import sacrebleu
    import torch
    import transformers
    from transformers import (AutoTokenizer, DataCollatorForSeq2Seq, HfArgumentParser, Seq2SeqTrainer,
                              Seq2SeqTrainingArguments, T5ForConditionalGeneration, TrainerCallback, set_seed)

    d, args = HfArgumentParser((DataArgs, Seq2SeqTrainingArguments)).parse_args_into_dataclasses()
    set_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(d.tokenizer_name or d.model_name_or_path)
    overrides = {} if d.dropout_rate is None else {"dropout_rate": d.dropout_rate}
    if d.attn_implementation:
        overrides["attn_implementation"] = d.attn_implementation
    model = T5ForConditionalGeneration.from_pretrained(d.model_name_or_path, **overrides)

    def preprocess(pairs):
        inputs = [d.source_prefix + s for s, _ in pairs]
        targets = [t for _, t in pairs]
        enc = tokenizer(inputs, max_length=d.max_source_length, padding=False, truncation=True)
        lab = tokenizer(text_target=targets, max_length=d.max_target_length, padding=False, truncation=True)
        return [{"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i],
                 "labels": lab["input_ids"][i]} for i in range(len(pairs))]

    train = preprocess(read_jsonl(d.train_file, d.source_lang, d.target_lang, d.max_train_samples)) \
        if args.do_train else None
    val = preprocess(read_jsonl(d.validation_file, d.source_lang, d.target_lang, d.max_eval_samples)) \
        if args.do_eval else None
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100 if d.ignore_pad_token_for_loss
                                      else tokenizer.pad_token_id, pad_to_multiple_of=8 if args.fp16 else None)

    def compute_metrics(eval_preds):
        preds, labels = eval_preds
        if isinstance(preds, tuple):
            preds = preds[0]
        preds = np.where(preds != -100, preds, tokenizer.pad_token_id)
        hyp = [p.strip() for p in tokenizer.batch_decode(preds, skip_special_tokens=True)]
        labels = np.where(labels != -100, labels, tokenizer.pad_token_id)
        ref = [r.strip() for r in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        bleu = sacrebleu.corpus_bleu(hyp, [ref]).score
        gen_len = float(np.mean([np.count_nonzero(p != tokenizer.pad_token_id) for p in preds]))
        return {"bleu": round(bleu, 4), "gen_len": round(gen_len, 4)}

    log_path = os.path.join(args.output_dir, "trainer_log.jsonl")
    os.makedirs(args.output_dir, exist_ok=True)
    logf = open(log_path, "w") if args.process_index == 0 else None

    class JsonLog(TrainerCallback):
        def on_log(self, a, state, control, logs=None, **kw):
            if logf is None or not logs:
                return
            if "loss" in logs:
                row = {"step": state.global_step, "loss": logs["loss"], "learning_rate": logs.get("learning_rate"),
                       "grad_norm": logs.get("grad_norm"), "max_steps": state.max_steps}
            elif "eval_loss" in logs:
                row = {"step": state.global_step}
                row.update({k: v for k, v in logs.items() if k.startswith("eval_")})
            else:
                return
            logf.write(json.dumps(row) + "\n")
            logf.flush()

        # AMP fp16 (no DeepSpeed): torch's GradScaler skips an overflowing step silently and the Trainer logs no
        # count; accelerate knows (optimizer_step_was_skipped). Each one is logged as t5train logs its own, an
        # "overflow" event line, and counted into run_summary.json's skipped_steps.
        skipped = 0
        trainer = None

        def on_step_end(self, a, state, control, **kw):
            acc = getattr(self.trainer, "accelerator", None)
            if acc is None or a.deepspeed or not getattr(acc, "optimizer_step_was_skipped", False):
                return
            self.skipped += 1
            if logf is not None:
                scaler = getattr(acc, "scaler", None)
                row = {"step": state.global_step, "event": "overflow",
                       "loss_scale_after": float(scaler.get_scale()) if scaler is not None else None}
                logf.write(json.dumps(row) + "\n")
                logf.flush()

    optimizers = (None, None)
    if d.hf_adafactor_t5:
        from transformers.optimization import Adafactor, AdafactorSchedule
        opt = Adafactor(model.parameters(), scale_parameter=True, relative_step=True, warmup_init=False, lr=None,
                        weight_decay=args.weight_decay)
        optimizers = (opt, AdafactorSchedule(opt))
    elif d.hf_adafactor_scale:
        from transformers.optimization import Adafactor
        opt = Adafactor(model.parameters(), scale_parameter=True, relative_step=False, warmup_init=False,
                        lr=args.learning_rate, weight_decay=args.weight_decay)
        optimizers = (opt, None)  # the Trainer builds its lr_scheduler_type schedule around it
    json_log = JsonLog()
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=train, eval_dataset=val, data_collator=collator,
                             processing_class=tokenizer,
                             compute_metrics=compute_metrics if args.predict_with_generate else None,
                             callbacks=[json_log], optimizers=optimizers)
    json_log.trainer = trainer
    if d.hf_model_accepts_loss_kwargs is not None:
        trainer.model_accepts_loss_kwargs = d.hf_model_accepts_loss_kwargs
    summary = {"argv": sys.argv[1:], "torch": torch.__version__, "transformers": transformers.__version__,
               "model_accepts_loss_kwargs": getattr(trainer, "model_accepts_loss_kwargs", None),
               "world_size": args.world_size, "gradient_accumulation_steps": args.gradient_accumulation_steps,
               "attn_implementation": getattr(model.config, "_attn_implementation", None),
               "optimizer": type(trainer.optimizer).__name__ if trainer.optimizer is not None else args.optim}
    if args.do_train:
        res = trainer.train()
        summary.update(res.metrics)
        summary["global_step"] = trainer.state.global_step
        engine = trainer.model_wrapped
        if hasattr(engine, "skipped_steps"):
            summary["skipped_steps"] = int(engine.skipped_steps)
        elif args.fp16:
            summary["skipped_steps"] = json_log.skipped
        if args.deepspeed:
            import deepspeed
            summary["deepspeed"] = deepspeed.__version__
    if args.do_eval:
        m = trainer.evaluate(metric_key_prefix="eval")
        summary["final_eval"] = m
    summary["wall_s"] = time.time() - T_START
    if args.do_train:
        world = args.world_size
        summary["samples_per_s_end_to_end"] = (summary["global_step"] * args.per_device_train_batch_size * world
                                               * args.gradient_accumulation_steps / summary["wall_s"])
    if args.process_index == 0:
        with open(os.path.join(args.output_dir, "run_summary.json"), "w") as f:
            json.dump(summary, f, indent=1, default=str)
        print("hf_side:", json.dumps({k: summary.get(k) for k in
                                      ("wall_s", "train_runtime", "train_loss", "skipped_steps",
                                       "samples_per_s_end_to_end", "model_accepts_loss_kwargs")}))


if __name__ == "__main__":
    main()
