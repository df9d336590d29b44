#!/usr/bin/env python3
"""list_ds_keys.py: every DeepSpeed config key a user can write, read from the installed DeepSpeed (0.19.8 when the
list was committed), for test_config_foreign (each must be a t5train deepspeed.* key, an alias, or an entry of
src/cli/config_foreign.c, or lie under a section listed there as a whole).

    DS_BUILD_OPS=0 python3 scripts/list_ds_keys.py > test/fixtures/config/ds_keys.tsv

Two sources, since DeepSpeed reads its config two ways:
  - the pydantic models (zero_optimization with its offload_param / offload_optimizer / zenflow sub-models, fp16,
    bf16, comms_logger): every field and alias, with its default;
  - DeepSpeedConfig's own reads of the JSON dict: the config is given as a dict that records every key asked of it
    (get, [], in, keys()), first empty, then with each section present as an empty recording dict, so that the keys
    read inside each section are recorded too (default: what DeepSpeed fell back to is not known here: null).
Lines: key (dotted, without "deepspeed.") <TAB> default as JSON <TAB> where (model name or "dict").
"""
import json
import sys
import typing

import pydantic


class Rec(dict):
    """A dict that records the keys asked of it, under its path."""
    seen = set()

    def __init__(self, path="", *a):
        super().__init__(*a)
        self.path = path

    def _note(self, k):
        if isinstance(k, str):
            Rec.seen.add(self.path + k)

    def get(self, k, d=None):
        self._note(k)
        return super().get(k, d)

    def __getitem__(self, k):
        self._note(k)
        return super().__getitem__(k)

    def __contains__(self, k):
        self._note(k)
        return super().__contains__(k)

    def keys(self):
        return self


def model_keys(model, prefix, out):
    for name, f in model.model_fields.items():
        default = f.get_default(call_default_factory=True)
        if isinstance(default, pydantic.BaseModel):
            default = default.model_dump()
        try:
            d = json.dumps(default)
        except TypeError:
            d = json.dumps(str(default))
        for key in {name, f.alias or name}:
            out[prefix + key] = (d, model.__name__)
        sub = [a for a in typing.get_args(f.annotation) or (f.annotation,)
               if isinstance(a, type) and issubclass(a, pydantic.BaseModel)]
        for m in sub:
            for alias in {name, f.alias or name}:
                model_keys(m, prefix + alias + ".", out)


def dict_keys(out):
    from deepspeed.runtime.config import DeepSpeedConfig
    base = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1}

    def run(cfg):
        try:
            DeepSpeedConfig(cfg)
        except Exception:  # an empty section may not validate; what was read before is recorded
            pass

    run(Rec("", base))
    top = sorted(k for k in Rec.seen if "." not in k)
    for k in top:  # each section present (empty), alone, so that one that fails does not hide the others
        if k in base:
            continue
        run(Rec("", dict(base, **{k: Rec(k + ".")})))
    for k in sorted(Rec.seen):
        out.setdefault(k, ("null", "dict"))


def main():
    import deepspeed
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.comm.config import CommsLoggerConfig
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    out = {}
    model_keys(DeepSpeedZeroConfig, "zero_optimization.", out)
    model_keys(DeepSpeedFP16Config, "fp16.", out)
    model_keys(DeepSpeedBF16Config, "bf16.", out)
    # DeepSpeedCommsConfig builds it with CommsLoggerConfig(**ds_config['comms_logger']): not read key by key
    model_keys(CommsLoggerConfig, "comms_logger.", out)
    dict_keys(out)
    print(f"# deepspeed {deepspeed.__version__}: pydantic models and DeepSpeedConfig's reads (scripts/list_ds_keys.py)")
    for k in sorted(out):
        d, where = out[k]
        print(f"{k}\t{d}\t{where}")


if __name__ == "__main__":
    sys.exit(main())
