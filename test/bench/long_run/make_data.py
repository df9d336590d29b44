#!/usr/bin/env python3
"""make_data.py: the data of the long-run comparison (issue 27), written from ../shared, never committed.

    python3 test/bench/long_run/make_data.py --shared ../shared/data --out .devdata/long_run

Writes, in run_translation's JSON-lines format ({"translation": {"en": ..., "ro": ...}}), which both
t5train (--train_file x.jsonl) and the HF side read:
  train.jsonl        the 22,028 en-ro-extra pairs (mlqe-pe train/dev/test20, tatoeba, flores101 devtest,
                     ntrex128 newstest2019, in that order; the set docs/training_results.md section 2 used)
  validation.jsonl   newsdev2016, 1,999 pairs (the WMT16 validation split)
  task_<task>_train.jsonl, task_<task>_validation.jsonl
                     the learnable tasks: the same English sources, the target a deterministic transformation of
                     the English side (TASKS below), stored under "ro" so that both trainers read it with
                     --source_lang en --target_lang ro unchanged
  tokenizer/         spiece.model + tokenizer_config.json (transformers 5.x builds the T5 tokenizer with
                     AutoTokenizer.from_pretrained on it; T5Tokenizer(vocab_file=...) maps every piece to <unk>)
  manifest.json      counts and the sha256 of every file, so that both sides are known to read the same bytes

The tasks: the English sentence split on whitespace, each of the CODES most frequent words of the training
English side (lower-cased, ties broken alphabetically) replaced by a fixed code "w<rank>" (so "the" becomes
"w0"), other words copied as they are; then "reverse_codes" reverses the word order, "swap_codes" swaps
neighbouring words (a local reordering) and "codes" keeps the order. "short_reverse_codes" is reverse_codes on
each sentence cut into consecutive pieces of at most 8 words (one example per piece). The transformation needs no knowledge
beyond the sentence itself, so unseen words in newsdev2016 are still learnable (they are copied).
"""
import argparse
import collections
import hashlib
import json
import os
import shutil

EXTRA = [("mlqe-pe-ro-en", "train"), ("mlqe-pe-ro-en", "dev"), ("mlqe-pe-ro-en", "test20"),
         ("tatoeba", "tatoeba-test-v2021-03-30"), ("flores101", "devtest"), ("ntrex128", "newstest2019")]
CODES = 100
SHORT = 8  # words per source piece of the "short_" tasks
TASKS = ["reverse_codes", "codes", "swap_codes", "short_reverse_codes"]


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def read_pairs(folder, stem):
    en = read_lines(os.path.join(folder, stem + ".en"))
    ro = read_lines(os.path.join(folder, stem + ".ro"))
    if len(en) != len(ro):
        raise SystemExit(f"make_data: {folder}/{stem}: {len(en)} English lines but {len(ro)} Romanian")
    return list(zip(en, ro))


def code_table(sentences, n):
    counts = collections.Counter(w.lower() for s in sentences for w in s.split())
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return {w: f"w{i}" for i, (w, _) in enumerate(ranked)}


def sources(sentence, task):
    """The task's sources from one English sentence: the sentence itself, or for a "short_" task its words in
    consecutive pieces of at most SHORT (the last piece the remainder)."""
    if not task.startswith("short_"):
        return [sentence]
    w = sentence.split()
    return [" ".join(w[i:i + SHORT]) for i in range(0, len(w), SHORT)]


def transform(sentence, codes, task):
    task = task.removeprefix("short_")
    words = [codes.get(w.lower(), w) for w in sentence.split()]
    if task == "reverse_codes":
        words.reverse()
    elif task == "codes":
        pass
    elif task == "swap_codes":
        for i in range(0, len(words) - 1, 2):
            words[i], words[i + 1] = words[i + 1], words[i]
    else:
        raise SystemExit(f"make_data: unknown task '{task}'")
    return " ".join(words)


def write_jsonl(path, pairs):
    with open(path, "w", encoding="utf-8") as f:
        for en, ro in pairs:
            f.write(json.dumps({"translation": {"en": en, "ro": ro}}, ensure_ascii=False) + "\n")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.environ.get("T5TRAIN_DATA", "../shared/data"))
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    train = []
    for sub, stem in EXTRA:
        train += read_pairs(os.path.join(a.shared, "en-ro-extra", sub), stem)
    val = read_pairs(os.path.join(a.shared, "wmt16-ro-en"), "validation")
    write_jsonl(os.path.join(a.out, "train.jsonl"), train)
    write_jsonl(os.path.join(a.out, "validation.jsonl"), val)
    codes = code_table([en for en, _ in train], CODES)
    for task in TASKS:
        for split, pairs in (("train", train), ("validation", val)):
            write_jsonl(os.path.join(a.out, f"task_{task}_{split}.jsonl"),
                        [(src, transform(src, codes, task)) for en, _ in pairs for src in sources(en, task)])
    tok = os.path.join(a.out, "tokenizer")
    os.makedirs(tok, exist_ok=True)
    shutil.copy(os.path.join(a.shared, "t5-spiece", "spiece.model"), tok)
    with open(os.path.join(tok, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "T5Tokenizer", "model_max_length": 512, "extra_ids": 100}, f)
    files = ["train.jsonl", "validation.jsonl", "tokenizer/spiece.model"] + \
        [f"task_{t}_{split}.jsonl" for t in TASKS for split in ("train", "validation")]
    manifest = {"train_pairs": len(train), "validation_pairs": len(val), "tasks": TASKS, "codes": CODES,
                "code_examples": dict(list(codes.items())[:5]),
                "sha256": {f: sha256(os.path.join(a.out, f)) for f in files}}
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"make_data: {len(train)} train pairs, {len(val)} validation pairs, tasks {', '.join(TASKS)} -> {a.out}")
    for t in TASKS:
        src = sources(val[2][0], t)[0]
        print(f"  {t}: {src!r}\n    -> {transform(src, codes, t)!r}")


if __name__ == "__main__":
    main()
