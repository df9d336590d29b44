#!/usr/bin/env python3
"""list_hf_args.py: every flag a run_translation.py user can type, written from the installed transformers, for
test_config_foreign (each must be a t5train key, an alias, or in src/cli/config_foreign.c's table).

    python3 scripts/list_hf_args.py > test/fixtures/config/hf_args.tsv

Lines: name <TAB> kind (bool, int, float, str, json) <TAB> default as JSON <TAB> where (training_args: transformers'
Seq2SeqTrainingArguments, read from the installed package; run_translation: its ModelArguments and
DataTrainingArguments at huggingface/transformers c73b6660 (REFERENCE.md), transcribed below since the example
script is not part of the package). The header line names the transformers version.
"""
import dataclasses
import enum
import json
import typing

# run_translation.py @c73b6660: ModelArguments, then DataTrainingArguments (name, kind, default)
RUN_TRANSLATION = [
    ("model_name_or_path", "str", None), ("config_name", "str", None), ("tokenizer_name", "str", None),
    ("cache_dir", "str", None), ("use_fast_tokenizer", "bool", True), ("model_revision", "str", "main"),
    ("token", "str", None), ("trust_remote_code", "bool", False),
    ("source_lang", "str", None), ("target_lang", "str", None), ("dataset_name", "str", None),
    ("dataset_config_name", "str", None), ("train_file", "str", None), ("validation_file", "str", None),
    ("test_file", "str", None), ("overwrite_cache", "bool", False), ("preprocessing_num_workers", "int", None),
    ("max_source_length", "int", 1024), ("max_target_length", "int", 128), ("val_max_target_length", "int", None),
    ("pad_to_max_length", "bool", False), ("max_train_samples", "int", None), ("max_eval_samples", "int", None),
    ("max_predict_samples", "int", None), ("num_beams", "int", 1), ("ignore_pad_token_for_loss", "bool", True),
    ("source_prefix", "str", None), ("forced_bos_token", "str", None),
]


def kind_of(tp):
    """bool / int / float / str / json from a dataclass field's annotation (Optional and unions looked through)."""
    args = [a for a in typing.get_args(tp) if a is not type(None)] or [tp]
    for want, name in ((bool, "bool"), (int, "int"), (float, "float")):
        if all(a is want for a in args[:1]):
            return name
    if any(isinstance(a, type) and issubclass(a, enum.Enum) for a in args) or all(a is str for a in args[:1]):
        return "str"
    return "json"


def default_json(f):
    if f.default is not dataclasses.MISSING:
        d = f.default
    elif f.default_factory is not dataclasses.MISSING:
        d = f.default_factory()
    else:
        d = None
    if isinstance(d, enum.Enum):
        d = d.value
    try:
        return json.dumps(d)
    except TypeError:
        return json.dumps(str(d))


def main():
    import transformers
    from transformers import Seq2SeqTrainingArguments
    hints = typing.get_type_hints(Seq2SeqTrainingArguments)
    print(f"# transformers {transformers.__version__} Seq2SeqTrainingArguments; run_translation.py @c73b6660")
    seen = set()
    for name, kind, d in RUN_TRANSLATION:
        seen.add(name)
        print(f"{name}\t{kind}\t{json.dumps(d)}\trun_translation")
    for f in dataclasses.fields(Seq2SeqTrainingArguments):
        if not f.init or f.name.startswith("_") or f.name in seen:
            continue
        print(f"{f.name}\t{kind_of(hints.get(f.name, f.type))}\t{default_json(f)}\ttraining_args")


if __name__ == "__main__":
    main()
