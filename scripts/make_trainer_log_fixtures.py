#!/usr/bin/env python3
"""
make_trainer_log_fixtures.py: golden strings for test/test_trainer_log.c and test/test_results.c.

Uses the real reference implementations installed with pip (no torch needed):
  - tqdm.tqdm.format_meter / format_interval: the progress bar HF's ProgressCallback draws
    (tqdm(total=max_steps, dynamic_ncols=True): unicode bar, unit "it", no prefix);
  - Python's float repr and round(): HF Trainer (transformers 4.x) prints logs with print(dict), i.e.
    repr of floats, after round(loss, 4) and round(epoch, 2);
  - transformers.trainer_pt_utils.metrics_format + log_metrics layout ("***** train metrics *****");
  - json.dumps(indent=4, sort_keys=True) as save_metrics writes *_results.json.

Writes test/fixtures/trainer_log/{meter.tsv,repr.tsv,metrics.txt,results.json}
Run: python3 scripts/make_trainer_log_fixtures.py
"""
import io
import json
import os
from contextlib import redirect_stdout

from tqdm import tqdm

OUT = os.path.join(os.path.dirname(__file__), "..", "test", "fixtures", "trainer_log")
os.makedirs(OUT, exist_ok=True)

# ---- progress meter: n, total, elapsed, rate ("none" = average n/elapsed), ncols (0 = no width known)
cases = [
    (650, 114024, 606.4, 1.19, 0),
    (650, 114024, 606.4, 1.19, 100),
    (0, 3000, 0.0, None, 0),
    (0, 3000, 0.0, None, 80),
    (1, 3000, 0.7, None, 80),
    (120, 3000, 49.9, 2.4123, 120),
    (120, 3000, 49.9, 0.4, 120),            # slower than 1 it/s -> s/it
    (3000, 3000, 3725.2, 0.81, 80),
    (5, 10, 61.0, 0.0819, 60),
    (1499, 1500, 35999.9, 0.04, 90),        # hours, s/it with 2 digits
    (7, 1000, 3.0, 123.456, 72),
    (999, 1000, 100.0, 9.99, 50),
    (1, 2, 1.0, 1.0, 0),                    # exactly 1 it/s -> it/s
    (77, 500, 12345.0, None, 0),
    (33, 100, 9.5, 0.99999, 31),            # tiny terminal
]
with open(os.path.join(OUT, "meter.tsv"), "w", encoding="utf-8") as f:
    f.write("# n\ttotal\telapsed\trate\tncols\tformat_meter(...)\n")
    for n, total, elapsed, rate, ncols in cases:
        s = tqdm.format_meter(n, total, elapsed, ncols=ncols or None, rate=rate, unit="it")
        f.write(f"{n}\t{total}\t{elapsed!r}\t{'none' if rate is None else repr(rate)}\t{ncols}\t{s}\n")

# ---- python float repr and round
vals = [1.2345678, 4.8e-05, 5e-05, 0.81, 65536.0, 1.0, 0.0, -0.0, 1e-4, 1e-5, 1.5e-05, 123456789.125,
        1e16, 1.2345e16, 9999999999999998.0, 0.1 + 0.2, 2.0 / 3.0, 1e-300, 1.7976931348623157e308, 3.14159,
        12.5, 0.000123, 2.5e-07, 100.0, 1e22, 5e-324]
with open(os.path.join(OUT, "repr.tsv"), "w") as f:
    f.write("# value(hex)\trepr\tround4\tround2\n")
    for v in vals:
        f.write(f"{v.hex()}\t{v!r}\t{round(v, 4)!r}\t{round(v, 2)!r}\n")

# ---- log_metrics print layout (transformers trainer_pt_utils.log_metrics/metrics_format)
try:
    from transformers.trainer_pt_utils import metrics_format
except Exception:  # transformers not installed: the same few lines
    import datetime

    def metrics_format(metrics):
        m = metrics.copy()
        for k, v in m.items():
            if "_mem_" in k:
                m[k] = f"{v >> 20}MB"
            elif "_runtime" in k:
                msec = int(abs(v - int(v)) * 100)
                m[k] = f"{datetime.timedelta(seconds=int(v))}.{msec:02d}"
            elif k == "total_flos":
                m[k] = f"{int(v) >> 30}GF"
            elif isinstance(m[k], float):
                m[k] = round(v, 4)
        return m

train_metrics = {"epoch": 1.0, "total_flos": 1234567890123.0, "train_loss": 1.234567891,
                 "train_runtime": 3725.4567, "train_samples": 500, "train_samples_per_second": 0.134,
                 "train_steps_per_second": 0.134}
eval_metrics = {"epoch": 1.0, "eval_loss": 0.987654321, "eval_runtime": 61.03, "eval_samples": 1999,
                "eval_samples_per_second": 32.755, "eval_steps_per_second": 8.193, "eval_bleu": 27.1234,
                "eval_gen_len": 28.4}


def log_metrics(split, metrics):
    print(f"***** {split} metrics *****")
    mf = metrics_format(metrics)
    kw = max(len(str(x)) for x in mf)
    vw = max(len(str(x)) for x in mf.values())
    for key in sorted(mf.keys()):
        print(f"  {key: <{kw}} = {mf[key]:>{vw}}")


buf = io.StringIO()
with redirect_stdout(buf):
    log_metrics("train", train_metrics)
    log_metrics("eval", eval_metrics)
with open(os.path.join(OUT, "metrics.txt"), "w") as f:
    f.write(buf.getvalue())

# ---- save_metrics files: train then eval, all_results merged (combined=True)
with open(os.path.join(OUT, "train_results.json"), "w") as f:
    json.dump(train_metrics, f, indent=4, sort_keys=True)
allm = dict(train_metrics)
allm.update(eval_metrics)
with open(os.path.join(OUT, "all_results.json"), "w") as f:
    json.dump(allm, f, indent=4, sort_keys=True)
print("wrote", OUT)

# ---- trainer_state.json written by transformers' own TrainerState (TrainerControl in stateful_callbacks)
try:
    from transformers.trainer_callback import TrainerControl, TrainerState

    ctl = TrainerControl(should_training_stop=True, should_save=True)
    st = TrainerState(epoch=1.0, global_step=500, max_steps=500, logging_steps=100, eval_steps=250, save_steps=250,
                      train_batch_size=1, num_train_epochs=1, total_flos=1234567890123.0,
                      stateful_callbacks=[ctl])
    st.log_history = [
        {"loss": 2.8415, "grad_norm": 3.718281828459045, "learning_rate": 4.02e-05, "epoch": 0.2, "step": 100},
        {"eval_loss": 1.9876543, "eval_bleu": 21.0123, "eval_runtime": 12.3456, "epoch": 0.5, "step": 250},
        {"train_runtime": 3725.4567, "train_samples_per_second": 0.134, "train_steps_per_second": 0.134,
         "total_flos": 1234567890123.0, "train_loss": 2.1234567891, "epoch": 1.0, "step": 500},
    ]
    st.save_to_json(os.path.join(OUT, "trainer_state.json"))
except ImportError as e:
    print("transformers not importable, trainer_state.json fixture not rewritten:", e)
