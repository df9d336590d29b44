#!/usr/bin/env python3
"""Writes test/fixtures/model_card/: the README.md model cards transformers' own modelcard.py
(TrainingSummary.from_trainer(...).to_model_card(), what Trainer.create_model_card and Trainer.push_to_hub write)
produces for a few runs, and each run's log_history, for test/test_model_card.c.

Run where transformers 5.x is installed (no GPU, no network: HF_HUB_OFFLINE=1, so no license is looked up):

    python3 scripts/make_model_card_fixtures.py

The Trainer is a stand-in holding exactly the attributes from_trainer reads (args, state.log_history,
model.config._name_or_path); the kwargs are run_translation.py's: finetuned_from=model_name_or_path,
tasks="translation", dataset_tags / dataset_args / dataset when --dataset_name is given, language=[src, tgt].
Two things are then changed the way t5train's card differs from HF's on purpose (docs/training.md "The model card"):
the "### Framework versions" lines (t5train's, CUDA's and NCCL's versions in place of Transformers / Pytorch /
Datasets / Tokenizers), and, for a base model that is a local folder, no base_model key and no Hub link.
"""
import json
import os
import sys
from types import SimpleNamespace

os.environ["HF_HUB_OFFLINE"] = "1"

import transformers  # noqa: E402
from transformers.modelcard import TrainingSummary  # noqa: E402
from transformers.trainer_utils import SchedulerType  # noqa: E402
from transformers.training_args import OptimizerNames, ParallelMode  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "fixtures", "model_card")
VERSIONS = "- t5train 0.1.0 (git test)\n- CUDA runtime 12.8\n- NCCL 2.26.2 (built with 2.26.2)\n"


def args(**kw):
    a = dict(output_dir="output_dir", learning_rate=5e-05, train_batch_size=8, eval_batch_size=8, seed=42,
             parallel_mode=ParallelMode.NOT_PARALLEL, world_size=1, gradient_accumulation_steps=1,
             optim=OptimizerNames("adamw_torch"), optim_args=None, adam_beta1=0.9, adam_beta2=0.999,
             adam_epsilon=1e-08, lr_scheduler_type=SchedulerType("linear"), warmup_steps=0, max_steps=-1,
             num_train_epochs=3.0, fp16=False, label_smoothing_factor=0.0)
    a.update(kw)
    return SimpleNamespace(**a)


def eval_entry(epoch, step, loss, bleu, gen_len, runtime=12.3456):
    e = {"eval_loss": loss, "eval_bleu": bleu, "eval_gen_len": gen_len, "eval_runtime": runtime,
         "eval_samples_per_second": 40.501, "eval_steps_per_second": 5.063}
    if epoch is not None:
        e["epoch"] = epoch
    e["step"] = step
    return e


def train_entry(epoch, step, train_loss):
    return {"epoch": epoch, "step": step, "total_flos": 1234567890123.0, "train_loss": train_loss,
            "train_runtime": 321.9876, "train_samples_per_second": 15.531, "train_steps_per_second": 1.941}


def loss_entry(epoch, step, loss, lr):
    return {"epoch": epoch, "grad_norm": 1.2345678, "learning_rate": lr, "loss": loss, "step": step}


def kwargs(model, dataset_name=None, dataset_config=None, src="en", tgt="ro"):
    kw = {"finetuned_from": model, "tasks": "translation"}  # run_translation.py, the end of main()
    if dataset_name is not None:
        kw["dataset_tags"] = dataset_name
        if dataset_config is not None:
            kw["dataset_args"] = dataset_config
            kw["dataset"] = f"{dataset_name} {dataset_config}"
        else:
            kw["dataset"] = dataset_name
    langs = [x for x in (src, tgt) if x is not None]
    if langs:
        kw["language"] = langs
    return kw


CASES = {
    # the homework: deepspeed --num_gpus=1 (ParallelMode.DISTRIBUTED on one GPU), --fp16, wmt16 ro-en, epochs;
    # an evaluation before the first logged loss ("No log"), one after, then the final evaluate()
    "deepspeed_fp16": dict(
        args=args(parallel_mode=ParallelMode.DISTRIBUTED, fp16=True, num_train_epochs=1.0, warmup_steps=500.0),
        kw=kwargs("t5-small", "wmt16", "ro-en"),
        log=[eval_entry(0.2, 50, 2.123456789, 10.1234, 27.5), loss_entry(0.4, 100, 1.9876, 4.5e-05),
             eval_entry(0.8, 200, 1.5, 20.25, 28.125), loss_entry(1.0, 250, 1.4321, 1e-06),
             train_entry(1.0, 250, 1.7098765432), eval_entry(1.0, 250, 1.456789, 21.0987, 28.4)]),
    # a train_file run (no dataset_name), bf16 (no mixed_precision line, as HF), --max_steps, no evaluation at all
    "bf16_no_eval": dict(
        args=args(output_dir="runs/t5-base-ro/.", max_steps=200, learning_rate=0.0003),
        kw=kwargs("google-t5/t5-base", None, None),
        log=[loss_entry(0.5, 100, 2.5, 0.00015), loss_entry(1.0, 200, 2.25, 0.0),
             train_entry(1.0, 200, 2.375)]),
    # 4 GPUs x accumulation 2, warmup as a ratio (transformers 5: warmup_steps 0.1), cosine, Adafactor, label
    # smoothing, fp32; pushed with --hub_model_id org/name; --dataset_name without a config
    "multi_gpu_ratio": dict(
        args=args(parallel_mode=ParallelMode.DISTRIBUTED, world_size=4, gradient_accumulation_steps=2,
                  warmup_steps=0.1, lr_scheduler_type=SchedulerType("cosine"), optim=OptimizerNames("adafactor"),
                  label_smoothing_factor=0.1, train_batch_size=4, eval_batch_size=16, num_train_epochs=2.0),
        kw=dict(kwargs("t5-small", "opus_books", None, "en", "fr"), model_name="t5-opus-ft"),
        log=[loss_entry(1.0, 10, 3.0, 5e-05), eval_entry(1.0, 10, 2.75, 5.5, 30.0),
             loss_entry(2.0, 20, 2.5, 0.0), eval_entry(2.0, 20, 2.5, 6.75, 29.0),
             train_entry(2.0, 20, 2.75), eval_entry(2.0, 20, 2.5, 6.75, 29.0)]),
    # an evaluation-only run (no train_runtime entry: the last evaluation's raw entry is the results, no table) of
    # a model in a local folder; output_dir "." (no name: the base model's name is the card's)
    "local_eval_only": dict(
        args=args(output_dir="."),
        kw=kwargs("/data/models/t5-small", "wmt16", "ro-en"),
        log=[eval_entry(None, 0, 1.25, 25.5, 27.0)],
        local=True),
}


def t5train_card(text, local, model):
    head, sep, _ = text.partition("### Framework versions\n\n")
    assert sep, "no framework versions section"
    text = head + sep + VERSIONS
    if local:  # docs/training.md: the Hub refuses a base_model that is no repo id; the folder is named, unlinked
        text = text.replace(f"base_model: {model}\n", "")
        text = text.replace(f"[{model}](https://huggingface.co/{model})", model)
    return text


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, c in CASES.items():
        trainer = SimpleNamespace(args=c["args"], state=SimpleNamespace(log_history=c["log"]),
                                  model=SimpleNamespace(config=SimpleNamespace(_name_or_path=c["kw"]["finetuned_from"])),
                                  eval_dataset=None, train_dataset=None)
        card = TrainingSummary.from_trainer(trainer, **c["kw"]).to_model_card()
        card = t5train_card(card, c.get("local", False), c["kw"]["finetuned_from"])
        with open(os.path.join(OUT, f"{name}.md"), "w") as f:
            f.write(card)
        with open(os.path.join(OUT, f"{name}.log_history.json"), "w") as f:
            json.dump(c["log"], f, indent=1)
            f.write("\n")
    with open(os.path.join(OUT, "VERSIONS"), "w") as f:
        f.write(f"transformers {transformers.__version__}, Python {sys.version.split()[0]}\n")


if __name__ == "__main__":
    main()
