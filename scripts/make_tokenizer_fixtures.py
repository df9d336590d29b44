#!/usr/bin/env python3
"""make_tokenizer_fixtures.py: reference T5 token ids and decoded text from HF transformers.

Writes test/fixtures/tokenizer/*.ids (one line of space-separated ids per input line) and
*.dec (HF's batch_decode(..., skip_special_tokens=True) text, one line per id sequence), read by
test/test_data_tokenizer.c against the shared data ($T5TRAIN_DATA).

    pip install transformers sentencepiece tokenizers protobuf   # CPU only, no torch
    T5TRAIN_DATA=../shared/data python3 scripts/make_tokenizer_fixtures.py [--check-all]

transformers 5.x: T5Tokenizer(vocab_file=...) maps every piece to <unk>, so the tokenizer is
built with AutoTokenizer.from_pretrained on a temp dir holding spiece.model and a t5-small-like
tokenizer_config.json. Every line without added tokens is also checked against the
sentencepiece library itself (ids[:-1] == sp.encode(text)). --check-all additionally compares
t5train's `tokenize` output on the full extra corpora (needs $T5TRAIN_BIN).
"""
import argparse, json, os, shutil, subprocess, sys, tempfile

import sentencepiece as spm
import transformers
from transformers import AutoTokenizer

DATA = os.environ.get("T5TRAIN_DATA") or os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "fixtures", "tokenizer")
PREFIX = {("en", "ro"): "translate English to Romanian: ", ("ro", "en"): "translate Romanian to English: "}
CLEAN_SUBSET = 300  # lines of the validation decode fixture also kept with clean_up_tokenization_spaces=True
EXTRA_SUBSET = 200  # lines per extra-corpus file kept as fixtures (the whole set is checked with --check-all)

# edge cases: added tokens in text, whitespace variants, unknown characters, empty text
EDGE = [
    "Studies have shown that owning a dog is good for you",
    "a <extra_id_0>hello<extra_id_1> world </s> x",
    "<extra_id_0>", "<extra_id_99> <extra_id_100> <extra_id_05> <extra_id_1", "x<pad>y<unk>z", "a</s>",
    "  <extra_id_0>  x  ", "   leading and trailing spaces   ", "two  inner   spaces", "tab\there\tand\tthere",
    "nbsp\u00a0x narrow\u202fx ideographic\u3000x ogham\u1680x nel\u0085x ls\u2028x ps\u2029x",
    "zero\u200bwidth bom\ufeff soft\u00adhyphen ctrl\x01x del\x7fx vt\x0bx ff\x0cx cr\rx",
    "é ö 日本 😀 ﬁ ① Ⅻ ｆｕｌｌ", "Fostul șef al cabinetului prezidențial brazilian ş ţ Ş Ţ ș ț Ș Ț",
    "Hello . world , it 's don 't ?!", "", " ", "12,345.67 $ € £ % & @ # ~ ` ^ | \\ / { } [ ]",
    "«quoted» „Romanian” ‘single’ “double” — – … •",
    "Hello . world , it 's don 't ? ! n't 'm 've 're x ' y . . ,,",
]
# id sequences for decode: specials, unk, out-of-range, leading "▁" alone
DECODE_EDGE = [
    [32099, 8, 32098, 9, 2, 32110, 5], [3, 32099, 3, 9, 3], [32127, 32100, 9, 0, 8], [0, 8, 1, 0, 0],
    [3, 3, 3], [6, 3, 6], [1], [], [2, 2, 2, 8, 2], [21820, 296, 1, 0, 0, 0], [3, 2, 3, 154, 3, 2, 1],
    [8774, 3, 5, 296, 3, 6, 34, 3, 31, 7, 1], [31, 7, 3, 31], [32000, 32001, 1, 1],
]


def read_lines(path):
    with open(path, "rb") as f:
        data = f.read().decode("utf-8")
    lines = data.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [l[:-1] if l.endswith("\r") else l for l in lines]


def read_jsonl(path, src, tgt):
    s, t = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)["translation"]
            s.append(row[src])
            t.append(row[tgt])
    return s, t


def ids_text(seqs):
    return "".join(" ".join(str(i) for i in ids) + "\n" for ids in seqs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check-all", action="store_true")
    args = ap.parse_args()
    model = os.path.join(DATA, "t5-spiece", "spiece.model")
    tmp = tempfile.mkdtemp()
    shutil.copy(model, tmp)
    with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "T5Tokenizer", "extra_ids": 100, "model_max_length": 512}, f)
    tok = AutoTokenizer.from_pretrained(tmp)
    sp = spm.SentencePieceProcessor(model_file=model)
    assert len(tok) == 32100, len(tok)
    os.makedirs(OUT, exist_ok=True)
    stats = {"lines": 0, "spm_checked": 0, "spm_mismatch": 0}

    def encode(texts, prefix="", max_length=None):
        kw = dict(max_length=max_length, truncation=True) if max_length else {}
        out = tok([prefix + t for t in texts], **kw)["input_ids"]
        for t, ids in zip(texts, out):  # sanity: HF == sentencepiece on plain text
            full = prefix + t
            if "<" in full or "\x85" in full:
                continue
            ref = sp.encode(full)
            if max_length:
                ref = ref[: max_length - 1]
            stats["spm_checked"] += 1
            stats["spm_mismatch"] += (ref + [1]) != ids
        stats["lines"] += len(texts)
        return out

    def write(name, text):
        with open(os.path.join(OUT, name), "w", encoding="utf-8", newline="\n") as f:
            f.write(text)

    # 1. WMT16 validation (newsdev2016), both directions, with prefix on the source side
    en = read_lines(os.path.join(DATA, "wmt16-ro-en", "validation.en"))
    ro = read_lines(os.path.join(DATA, "wmt16-ro-en", "validation.ro"))
    for (s, t, stext, ttext) in [("en", "ro", en, ro), ("ro", "en", ro, en)]:
        for L in (128, 16):
            write(f"val.{s}{t}.src.{L}.ids", ids_text(encode(stext, PREFIX[(s, t)], L)))
            tgt_ids = encode(ttext, "", L)
            write(f"val.{s}{t}.tgt.{L}.ids", ids_text(tgt_ids))
            if L == 128:
                write(f"val.{s}{t}.tgt.{L}.dec", "".join(d + "\n" for d in tok.batch_decode(tgt_ids, skip_special_tokens=True)))
                # older transformers decoded with clean_up_tokenization_spaces=True: the first lines, for that option
                write(f"val.{s}{t}.tgt.{L}.clean.dec", "".join(d + "\n" for d in tok.batch_decode(
                    tgt_ids[:CLEAN_SUBSET], skip_special_tokens=True, clean_up_tokenization_spaces=True)))

    # 2. extra corpora: the first EXTRA_SUBSET lines of each file, no prefix, no truncation
    extra = []
    for root, _, files in sorted(os.walk(os.path.join(DATA, "en-ro-extra"))):
        for fn in sorted(files):
            if fn.endswith(".en") or fn.endswith(".ro"):
                extra.append(os.path.relpath(os.path.join(root, fn), os.path.join(DATA, "en-ro-extra")))
    lst = []
    for rel in extra:
        lines = read_lines(os.path.join(DATA, "en-ro-extra", rel))[:EXTRA_SUBSET]
        name = "extra." + rel.replace("/", "__") + ".ids"
        write(name, ids_text(encode(lines)))
        lst.append(f"{rel} {name}\n")
    write("extra.list", "".join(lst))

    # 3. HF's own samples (json-lines and legacy .source/.target), en->ro with prefix
    hf = os.path.join(DATA, "hf-fixtures")
    for rel, name in [("tests_samples/wmt16/sample.json", "hf.wmt16_sample"), ("tests_samples/wmt_en_ro/train.json", "hf.wmt_en_ro_train"),
                      ("tests_samples/wmt_en_ro/val.json", "hf.wmt_en_ro_val")]:
        s, t = read_jsonl(os.path.join(hf, rel), "en", "ro")
        write(name + ".src.ids", ids_text(encode(s, PREFIX[("en", "ro")], 1024)))
        tids = encode(t, "", 128)
        write(name + ".tgt.ids", ids_text(tids))
        write(name + ".tgt.dec", "".join(d + "\n" for d in tok.batch_decode(tids, skip_special_tokens=True)))
    for split in ("train", "val"):
        s = read_lines(os.path.join(hf, "legacy_seq2seq_test_data/wmt_en_ro", split + ".source"))
        write(f"hf.legacy_{split}.source.ids", ids_text(encode(s, PREFIX[("en", "ro")], 1024)))

    # 4. edge cases (inputs stored here: they are ours, not shared data)
    write("edge.txt", "".join(e + "\n" for e in EDGE))
    write("edge.ids", ids_text(encode(EDGE)))
    write("edge.prefix8.ids", ids_text(encode(EDGE, PREFIX[("en", "ro")], 8)))
    write("decode_edge.ids", ids_text(DECODE_EDGE))
    write("decode_edge.dec", "".join(json.dumps(tok.decode(d, skip_special_tokens=True), ensure_ascii=False) + "\n" for d in DECODE_EDGE))
    edge_ids = encode(EDGE)
    write("edge.clean.dec", "".join(json.dumps(tok.decode(d, skip_special_tokens=True, clean_up_tokenization_spaces=True),
                                               ensure_ascii=False) + "\n" for d in edge_ids))

    write("VERSIONS", f"transformers {transformers.__version__}\nsentencepiece {spm.__version__}\n"
          f"tokenizer {type(tok).__name__} clean_up_tokenization_spaces={tok.clean_up_tokenization_spaces}\n")
    print(f"{stats['lines']} lines encoded; HF vs sentencepiece library: {stats['spm_mismatch']} mismatches "
          f"in {stats['spm_checked']} plain lines")
    if stats["spm_mismatch"]:
        sys.exit(1)

    if args.check_all:  # whole extra corpora through t5train tokenize
        binp = os.environ.get("T5TRAIN_BIN", "./t5train")
        total = bad = 0
        for rel in extra:
            lines = read_lines(os.path.join(DATA, "en-ro-extra", rel))
            ref = encode(lines)
            out = subprocess.run([binp, "tokenize", "--tokenizer", model, "--source_prefix", "", os.path.join(DATA, "en-ro-extra", rel)],
                                 capture_output=True, text=True, check=True).stdout.split("\n")[: len(lines)]
            mism = sum(" ".join(map(str, r)) != o for r, o in zip(ref, out))
            print(f"  {rel}: {len(lines)} lines, {mism} mismatches")
            total += len(lines)
            bad += mism
        print(f"check-all: {total} lines, {bad} mismatches")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
