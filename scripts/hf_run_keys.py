#!/usr/bin/env python3
"""hf_run_keys.py: a real short run of transformers' Seq2SeqTrainer, driven as examples/pytorch/translation/
run_translation.py drives it, then the key sets (and value types) of every JSON file it wrote.

The dump is what test/test_hf_keys.c compares t5train's dicts with (test/fixtures/hf_keys/hf_run_keys.json), so
that the comparison is with a real HF run, not only with keys.json's transcription of transformers' code.

The run: a tiny random T5 (d_model 16, d_ff 32, 2+2 layers, 2 heads, d_kv 8) with the real T5 vocabulary
(spiece.model from $T5TRAIN_DATA/t5-spiece, loaded with AutoTokenizer from a folder holding it and a
tokenizer_config.json), the first 32 pairs of $T5TRAIN_DATA/wmt16-ro-en/validation.{en,ro} ("translate English to
Romanian: " prefix) for training, 8 of them for evaluation and 8 for prediction; CPU, fp32, max_steps 4, batch 4,
eval_strategy steps / eval_steps 2, save_steps 2, save_total_limit 1, logging_steps 1, predict_with_generate,
run_translation's compute_metrics (sacrebleu corpus BLEU -> "bleu", "gen_len"). With --load_best_model_at_end the
same run adds load_best_model_at_end and metric_for_best_model bleu (best_model_checkpoint / best_metric keys).
No datasets / evaluate packages: the dataset is a list of tokenized dicts, the metric sacrebleu.corpus_bleu (what
evaluate's "sacrebleu" metric calls).

Usage:
  python3 scripts/hf_run_keys.py --out test/fixtures/hf_keys/hf_run_keys.json [--work DIR] [--data DIR] [--full F]
  python3 scripts/hf_run_keys.py --compare OUTPUT_DIR    # a t5train run's files against the fixture (no torch)
Needs torch, transformers 5.x, accelerate, sentencepiece, sacrebleu (pip; python tooling only, never needed by the
binary). Both runs take about 10 s on 2 CPU cores (no GPU used: use_cpu=True).
"""
import argparse
import glob
import json
import os
import platform
import re
import shutil
import sys
import tempfile

PREFIX = "translate English to Romanian: "
N_PAIRS = 32


def jtype(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, list):
        return "list"
    return "dict"


def typed_keys(d):
    return {k: jtype(d[k]) for k in sorted(d)}


def merge_types(dicts):
    """keys -> type over several dicts of one kind (a key whose type varies gets "a|b")."""
    out = {}
    for d in dicts:
        for k, v in d.items():
            t = jtype(v)
            if k in out and t not in out[k].split("|"):
                out[k] = "|".join(sorted(out[k].split("|") + [t]))
            else:
                out.setdefault(k, t)
    return {k: out[k] for k in sorted(out)}


def classify(entry):
    if "train_runtime" in entry:
        return "log_history_train_end"
    if any(k.endswith("_loss") and k != "loss" for k in entry):
        return "log_history_eval"
    if "loss" in entry:
        return "log_history_train_step"
    return "log_history_other"


def state_keys(st):
    out = {"top": typed_keys(st)}
    cbs = st.get("stateful_callbacks") or {}
    out["stateful_callbacks"] = sorted(cbs)
    ctl = cbs.get("TrainerControl") or {}
    out["trainer_control"] = sorted(ctl)
    out["trainer_control_args"] = typed_keys(ctl.get("args") or {})
    out["trainer_control_attributes"] = typed_keys(ctl.get("attributes") or {})
    kinds = {}
    for e in st.get("log_history", []):
        kinds.setdefault(classify(e), []).append(e)
    out["log_history"] = {k: merge_types(v) for k, v in sorted(kinds.items())}
    out["log_history_kinds_in_order"] = [classify(e) for e in st.get("log_history", [])]
    return out


def dump_dir(out_dir):
    """key sets of every JSON file the run wrote, and the file lists (checkpoint-N named checkpoint-<N>)."""
    res = {"files_output_dir": [], "checkpoints_kept": [], "files_checkpoint": {}, "json": {}}
    for name in sorted(os.listdir(out_dir)):
        p = os.path.join(out_dir, name)
        if re.fullmatch(r"checkpoint-\d+", name):
            res["checkpoints_kept"].append(name)
            res["files_checkpoint"][name] = sorted(os.listdir(p))
            continue
        res["files_output_dir"].append(name + ("/" if os.path.isdir(p) else ""))
    for p in sorted(glob.glob(os.path.join(out_dir, "*.json")) + glob.glob(os.path.join(out_dir, "checkpoint-*",
                                                                                          "*.json"))):
        rel = os.path.relpath(p, out_dir)
        rel = re.sub(r"^checkpoint-\d+", "checkpoint-<N>", rel)
        with open(p, encoding="utf-8") as f:
            d = json.load(f)
        if os.path.basename(p) == "trainer_state.json":
            res["json"][rel] = state_keys(d)
        elif rel.startswith("checkpoint-<N>") and rel in res["json"]:
            continue
        else:
            res["json"][rel] = typed_keys(d) if isinstance(d, dict) else jtype(d)
    return res


def run(work, data, load_best):
    import numpy as np
    import sacrebleu
    import torch
    from transformers import (AutoTokenizer, DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments,
                              T5Config, T5ForConditionalGeneration, set_seed)

    tok_dir = os.path.join(work, "tokenizer")
    os.makedirs(tok_dir, exist_ok=True)
    shutil.copy(os.path.join(data, "t5-spiece", "spiece.model"), tok_dir)
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "T5Tokenizer", "model_max_length": 512, "extra_ids": 100}, f)
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)

    def lines(lang):
        with open(os.path.join(data, "wmt16-ro-en", "validation." + lang), encoding="utf-8") as f:
            return [next(f).rstrip("\n") for _ in range(N_PAIRS)]

    en, ro = lines("en"), lines("ro")

    # run_translation's preprocess_function (max_source_length 1024, max_target_length 128, no padding)
    def preprocess(src, tgt, max_target_length):
        enc = tokenizer([PREFIX + s for s in src], max_length=1024, truncation=True)
        lab = tokenizer(text_target=tgt, max_length=max_target_length, truncation=True)
        return [{"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i],
                 "labels": lab["input_ids"][i]} for i in range(len(src))]

    train_dataset = preprocess(en, ro, 128)
    eval_dataset = preprocess(en[:8], ro[:8], 128)
    predict_dataset = preprocess(en[8:16], ro[8:16], 128)

    out_dir = os.path.join(work, "out-best" if load_best else "out")
    args = dict(output_dir=out_dir, do_train=True, do_eval=True, do_predict=True, use_cpu=True, seed=42,
                per_device_train_batch_size=4, per_device_eval_batch_size=4, learning_rate=1e-3, max_steps=4,
                eval_strategy="steps", eval_steps=2, save_steps=2, save_total_limit=1, logging_steps=1,
                predict_with_generate=True, report_to="none", dataloader_num_workers=0)
    if load_best:
        args.update(load_best_model_at_end=True, metric_for_best_model="bleu")
    training_args = Seq2SeqTrainingArguments(**args)
    # run_translation: generation_max_length defaults to val_max_target_length, generation_num_beams to num_beams
    val_max_target_length, num_beams = 16, 1
    training_args.generation_max_length = val_max_target_length
    training_args.generation_num_beams = num_beams

    set_seed(training_args.seed)
    config = T5Config(vocab_size=len(tokenizer), d_model=16, d_ff=32, num_layers=2, num_decoder_layers=2,
                      num_heads=2, d_kv=8, decoder_start_token_id=tokenizer.pad_token_id,
                      pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    model = T5ForConditionalGeneration(config).to(torch.float32)
    model.resize_token_embeddings(len(tokenizer))

    data_collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100,
                                           pad_to_multiple_of=None)

    def postprocess_text(preds, labels):
        return [p.strip() for p in preds], [[l.strip()] for l in labels]

    def compute_metrics(eval_preds):
        preds, labels = eval_preds
        if isinstance(preds, tuple):
            preds = preds[0]
        preds = np.where(preds != -100, preds, tokenizer.pad_token_id)
        decoded_preds = tokenizer.batch_decode(preds, skip_special_tokens=True)
        labels = np.where(labels != -100, labels, tokenizer.pad_token_id)
        decoded_labels = tokenizer.batch_decode(labels, skip_special_tokens=True)
        decoded_preds, decoded_labels = postprocess_text(decoded_preds, decoded_labels)
        # evaluate's "sacrebleu": references transposed to sacrebleu's streams, corpus_bleu(...).score
        refs = [list(x) for x in zip(*decoded_labels)]
        result = {"bleu": sacrebleu.corpus_bleu(decoded_preds, refs).score}
        prediction_lens = [np.count_nonzero(pred != tokenizer.pad_token_id) for pred in preds]
        result["gen_len"] = np.mean(prediction_lens)
        return {k: round(v, 4) for k, v in result.items()}

    trainer = Seq2SeqTrainer(model=model, args=training_args, train_dataset=train_dataset,
                             eval_dataset=eval_dataset, processing_class=tokenizer, data_collator=data_collator,
                             compute_metrics=compute_metrics)

    # Training (run_translation's order)
    train_result = trainer.train()
    trainer.save_model()
    metrics = train_result.metrics
    metrics["train_samples"] = len(train_dataset)
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()

    metrics = trainer.evaluate(max_length=val_max_target_length, num_beams=num_beams, metric_key_prefix="eval")
    metrics["eval_samples"] = len(eval_dataset)
    trainer.log_metrics("eval", metrics)
    trainer.save_metrics("eval", metrics)

    predict_results = trainer.predict(predict_dataset, metric_key_prefix="predict", max_length=val_max_target_length,
                                      num_beams=num_beams)
    metrics = predict_results.metrics
    metrics["predict_samples"] = len(predict_dataset)
    trainer.log_metrics("predict", metrics)
    trainer.save_metrics("predict", metrics)
    if trainer.is_world_process_zero():
        predictions = predict_results.predictions
        predictions = np.where(predictions != -100, predictions, tokenizer.pad_token_id)
        predictions = tokenizer.batch_decode(predictions, skip_special_tokens=True, clean_up_tokenization_spaces=True)
        predictions = [pred.strip() for pred in predictions]
        with open(os.path.join(training_args.output_dir, "generated_predictions.txt"), "w", encoding="utf-8") as w:
            w.write("\n".join(predictions))
    res = dump_dir(out_dir)
    # the in-memory log_history after the final evaluate() (logged after save_state, so not in the file)
    res["log_history_in_memory_kinds_in_order"] = [classify(e) for e in trainer.state.log_history]
    return res


def condense(full):
    """the fixture: the default run's key sets (output_dir and a checkpoint), the --load_best_model_at_end run's
    trainer_state keys and kept checkpoints; each checked for agreement where the full dump repeats itself."""
    d = full["runs"]["default"]
    js = d["json"]
    st = js["trainer_state.json"]
    ck = js["checkpoint-<N>/trainer_state.json"]
    assert ck["top"] == st["top"], "a checkpoint's trainer_state.json keys differ from output_dir's"
    for kind, keys in ck["log_history"].items():
        assert keys == st["log_history"][kind], kind
    assert len(d["files_checkpoint"]) == 1, d["files_checkpoint"]
    out = {k: full[k] for k in ("_source", "command", "versions", "device")}
    for name in ("train_results", "eval_results", "predict_results", "all_results"):
        out[name] = js[name + ".json"]
    for kind, keys in st["log_history"].items():
        out[kind] = keys
    out["log_history_kinds_in_order"] = st["log_history_kinds_in_order"]
    out["checkpoint_log_history_kinds_in_order"] = ck["log_history_kinds_in_order"]
    out["log_history_in_memory_after_evaluate"] = d["log_history_in_memory_kinds_in_order"]
    out["trainer_state"] = st["top"]
    out["stateful_callbacks"] = st["stateful_callbacks"]
    out["trainer_control"] = st["trainer_control"]
    out["trainer_control_args"] = st["trainer_control_args"]
    out["trainer_control_attributes"] = st["trainer_control_attributes"]
    out["files_output_dir"] = d["files_output_dir"]
    out["files_checkpoint"] = next(iter(d["files_checkpoint"].values()))
    out["checkpoints_kept"] = d["checkpoints_kept"]
    b = full["runs"].get("load_best_model_at_end_bleu")
    if b:
        bst = b["json"]["trainer_state.json"]
        assert set(bst["top"]) == set(st["top"])
        out["load_best_model_at_end_bleu"] = {
            "trainer_state": bst["top"],
            "checkpoint_trainer_state": b["json"]["checkpoint-<N>/trainer_state.json"]["top"],
            "checkpoints_kept": b["checkpoints_kept"],
            "files_output_dir": b["files_output_dir"],
        }
    return out


def write_compact(path, obj):
    """one top-level key a line (each value compact JSON): small, and diffs stay readable"""
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        items = sorted(obj.items())
        for i, (k, v) in enumerate(items):
            if isinstance(v, dict) and any(isinstance(x, (dict, list)) for x in v.values()):
                inner = ",\n".join("  %s: %s" % (json.dumps(kk), json.dumps(vv, sort_keys=True))
                                   for kk, vv in sorted(v.items()))
                text = "{\n" + inner + "\n }"
            else:
                text = json.dumps(v, sort_keys=True)
            f.write(" %s: %s%s\n" % (json.dumps(k), text, "," if i + 1 < len(items) else ""))
        f.write("}\n")


def compare(fixture_path, out_dir):
    """a t5train run's output_dir (same kind of run: --do_train --do_eval --do_predict --predict_with_generate, eval
    and save by steps) against the fixture: key sets and value types of the results files, trainer_state.json
    (output_dir's and each checkpoint's) and its log_history entries. Returns the list of differences."""
    with open(fixture_path, encoding="utf-8") as f:
        fx = json.load(f)
    diffs = []

    def cmp(name, want, got):
        got_t = typed_keys(got)
        for k in sorted(set(want) | set(got_t)):
            if k not in got_t:
                diffs.append("%s: HF writes %s, t5train does not" % (name, k))
            elif k not in want:
                diffs.append("%s: t5train writes %s, HF does not" % (name, k))
            elif want[k] != got_t[k] and not (want[k] == "null" or got_t[k] == "null"):
                diffs.append("%s.%s: HF %s, t5train %s" % (name, k, want[k], got_t[k]))

    for name in ("train_results", "eval_results", "predict_results", "all_results"):
        p = os.path.join(out_dir, name + ".json")
        if not os.path.exists(p):
            diffs.append("%s.json: missing" % name)
            continue
        with open(p, encoding="utf-8") as f:
            cmp(name, fx[name], json.load(f))
    states = [os.path.join(out_dir, "trainer_state.json")] + sorted(
        glob.glob(os.path.join(out_dir, "checkpoint-*", "trainer_state.json")))
    best = fx.get("load_best_model_at_end_bleu", {}).get("trainer_state", {})
    for p in states:
        rel = os.path.relpath(p, out_dir)
        if not os.path.exists(p):
            diffs.append("%s: missing" % rel)
            continue
        with open(p, encoding="utf-8") as f:
            st = json.load(f)
        want = dict(fx["trainer_state"])
        if st.get("best_model_checkpoint") is not None and best:
            want = dict(best)
        cmp(rel, want, st)
        ctl = (st.get("stateful_callbacks") or {}).get("TrainerControl") or {}
        cmp(rel + " TrainerControl.args", fx["trainer_control_args"], ctl.get("args") or {})
        for i, e in enumerate(st.get("log_history", [])):
            kind = classify(e)
            if kind not in fx:
                diffs.append("%s log_history[%d]: an entry of no HF kind: %s" % (rel, i, sorted(e)))
            else:
                cmp("%s log_history[%d] (%s)" % (rel, i, kind), fx[kind], e)
        if rel == "trainer_state.json":
            kinds = [classify(e) for e in st.get("log_history", [])]
            if kinds and kinds[-1] != "log_history_train_end":
                diffs.append("trainer_state.json: log_history ends with %s, HF's with the train summary" % kinds[-1])
    return diffs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="where to write the key dump (JSON)")
    ap.add_argument("--compare", metavar="OUTPUT_DIR",
                    help="no HF run: compare a t5train run's output_dir with the fixture (--fixture); exit 1 on a "
                         "difference")
    ap.add_argument("--fixture", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test",
                                                      "fixtures", "hf_keys", "hf_run_keys.json"))
    ap.add_argument("--full", help="also write the full dump (every JSON file of both runs, by folder) here")
    ap.add_argument("--work", help="folder for the runs (default: a temporary one, removed)")
    ap.add_argument("--data", default=os.environ.get("T5TRAIN_DATA", os.path.join("..", "shared", "data")))
    ap.add_argument("--no_load_best", action="store_true", help="skip the --load_best_model_at_end run")
    a = ap.parse_args()
    if a.compare:
        diffs = compare(a.fixture, a.compare)
        for d in diffs:
            print(d)
        print("%s: %s" % (a.compare, "%d difference(s) from the real HF run's keys" % len(diffs) if diffs else
                          "every JSON output has the real HF run's keys and value types"))
        sys.exit(1 if diffs else 0)
    if not a.out:
        ap.error("--out is needed (or --compare)")
    import accelerate
    import numpy
    import sacrebleu
    import torch
    import transformers
    work = a.work or tempfile.mkdtemp(prefix="hf_run_keys.")
    os.makedirs(work, exist_ok=True)
    try:
        dump = {
            "_source": "Written by scripts/hf_run_keys.py: a real run of transformers' Seq2SeqTrainer driven as "
                       "run_translation.py drives it (train, save_model, save_metrics/save_state, evaluate, predict, "
                       "generated_predictions.txt), tiny random T5 with the real T5 vocabulary, 32 wmt16 ro-en "
                       "pairs, CPU fp32, max_steps 4, eval/save every 2 steps, save_total_limit 1, logging_steps 1, "
                       "predict_with_generate; then the same with load_best_model_at_end + metric_for_best_model "
                       "bleu. Keys and JSON value types only (values differ run to run). log_history kinds: "
                       "train_step (has loss), eval (has eval_loss), train_end (has train_runtime).",
            "command": "python3 scripts/hf_run_keys.py --out test/fixtures/hf_keys/hf_run_keys.json",
            "versions": {"python": platform.python_version(), "transformers": transformers.__version__,
                         "torch": torch.__version__, "accelerate": accelerate.__version__,
                         "sacrebleu": sacrebleu.__version__, "numpy": numpy.__version__},
            "device": "cpu (%d cores), fp32" % os.cpu_count(),
            "runs": {},
        }
        dump["runs"]["default"] = run(work, a.data, False)
        if not a.no_load_best:
            dump["runs"]["load_best_model_at_end_bleu"] = run(work, a.data, True)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    if a.full:
        with open(a.full, "w", encoding="utf-8") as f:
            json.dump(dump, f, indent=1, sort_keys=True)
            f.write("\n")
    write_compact(a.out, condense(dump))
    print("wrote", a.out)


if __name__ == "__main__":
    main()
