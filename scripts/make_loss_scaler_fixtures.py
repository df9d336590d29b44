#!/usr/bin/env python3
"""
make_loss_scaler_fixtures.py: golden traces for test/test_loss_scaler.c.

DeepSpeed is not installed here, so this file transcribes, line for line, the logic of
  microsoft/DeepSpeed deepspeed/runtime/fp16/loss_scaler.py  (DynamicLossScaler.__init__, update_scale,
                                                              LossScaler, CreateLossScaler)
  microsoft/DeepSpeed deepspeed/runtime/config.py            (get_dynamic_loss_scale_args)
  microsoft/DeepSpeed deepspeed/runtime/constants.py         (FP16_* defaults)
as of commit 38327e07f6cd (Feb 2025). torch.half is the dtype, rank 0, so the overflow message includes
the "Attempted loss scale" part exactly as logger.info receives it.

Writes test/fixtures/loss_scaler/<scenario>.txt:
  config <key=value ...>      keys present in the fp16 block (loss_scale always written)
  init <dynamic> <cur_scale> <scale_window> <delayed_shift> <consecutive> <min_scale>
  <iter> <overflow> <cur_scale> <cur_hysteresis> <last_overflow_iter> | <log line or ->
  error <iter> | <exception text>          (the run stops there)
Floats are written with repr() so the C side can compare them exactly.

Run: python3 scripts/make_loss_scaler_fixtures.py   (no third-party packages)
"""
import os
import random

# ---- deepspeed/runtime/constants.py
FP16_LOSS_SCALE_DEFAULT = 0
FP16_INITIAL_SCALE_POWER_DEFAULT = 16
FP16_LOSS_SCALE_WINDOW_DEFAULT = 1000
FP16_HYSTERESIS_DEFAULT = 2
FP16_CONSECUTIVE_HYSTERESIS_DEFAULT = False
FP16_MIN_LOSS_SCALE_DEFAULT = 1


# ---- deepspeed/runtime/config.py: get_dynamic_loss_scale_args (fp16 enabled)
def get_dynamic_loss_scale_args(fp16_dict):
    loss_scale_args = None
    dynamic_loss_args = ["initial_scale_power", "loss_scale_window", "min_loss_scale", "hysteresis",
                         "consecutive_hysteresis"]
    if any(arg in list(fp16_dict.keys()) for arg in dynamic_loss_args):
        init_scale = fp16_dict.get("initial_scale_power", FP16_INITIAL_SCALE_POWER_DEFAULT)
        scale_window = fp16_dict.get("loss_scale_window", FP16_LOSS_SCALE_WINDOW_DEFAULT)
        delayed_shift = fp16_dict.get("hysteresis", FP16_HYSTERESIS_DEFAULT)
        consecutive_hysteresis = fp16_dict.get("consecutive_hysteresis", FP16_CONSECUTIVE_HYSTERESIS_DEFAULT)
        min_loss_scale = fp16_dict.get("min_loss_scale", FP16_MIN_LOSS_SCALE_DEFAULT)
        loss_scale_args = {
            "init_scale": 2**init_scale,
            "scale_window": scale_window,
            "delayed_shift": delayed_shift,
            "consecutive_hysteresis": consecutive_hysteresis,
            "min_scale": min_loss_scale,
        }
    return loss_scale_args


# ---- deepspeed/runtime/fp16/loss_scaler.py
class LossScaler:
    def __init__(self, scale=1):
        self.cur_scale = scale
        self.dynamic = False

    def update_scale(self, overflow):
        pass


class DynamicLossScaler:
    def __init__(self, init_scale=2**32, scale_factor=2., scale_window=1000, min_scale=1, delayed_shift=1,
                 consecutive_hysteresis=False, raise_error_at_min_scale=True):
        self.cur_scale = init_scale
        self.cur_iter = 0
        self.last_overflow_iter = -1
        self.scale_factor = scale_factor
        self.scale_window = scale_window
        self.min_scale = min_scale
        self.delayed_shift = delayed_shift
        self.cur_hysteresis = delayed_shift
        self.consecutive_hysteresis = consecutive_hysteresis
        self.raise_error_at_min_scale = raise_error_at_min_scale
        self.dynamic = True
        self.log = []

    def update_scale(self, overflow):
        if overflow:
            if self.delayed_shift == 1 or self.cur_hysteresis == 1:
                if (self.cur_scale == self.min_scale) and self.raise_error_at_min_scale:
                    raise Exception(
                        "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.")
                else:
                    next_scale = max(self.cur_scale / self.scale_factor, self.min_scale)
                    overflow_msg = f"[deepspeed] OVERFLOW! Rank {0} Skipping step."
                    overflow_msg += f" Attempted loss scale: {int(self.cur_scale)}, reducing to {int(next_scale)}"
                    self.log.append(overflow_msg)
                    self.cur_scale = next_scale
            else:
                overflow_msg = f"[deepspeed] OVERFLOW! Rank {0} Skipping step."
                overflow_msg += (f" Attempted loss scale: {int(self.cur_scale)}, but hysteresis is "
                                 f"{self.cur_hysteresis}. Reducing hysteresis to {self.cur_hysteresis-1}")
                self.log.append(overflow_msg)
                self.cur_hysteresis -= 1
            self.last_overflow_iter = self.cur_iter
        else:
            if self.consecutive_hysteresis:
                self.cur_hysteresis = self.delayed_shift
            if (self.cur_iter - self.last_overflow_iter) % self.scale_window == 0:
                if not self.consecutive_hysteresis:
                    self.cur_hysteresis = self.delayed_shift
                self.cur_scale *= self.scale_factor
        self.cur_iter += 1


def CreateLossScaler(static_loss_scale, dynamic_scaling, dynamic_loss_args):
    # dtype == torch.half
    if dynamic_scaling:
        if dynamic_loss_args is None:
            return DynamicLossScaler()
        return DynamicLossScaler(**dynamic_loss_args)
    return LossScaler(scale=static_loss_scale)


def build(fp16_dict):
    loss_scale = fp16_dict.get("loss_scale", FP16_LOSS_SCALE_DEFAULT)
    return CreateLossScaler(loss_scale, loss_scale == 0, get_dynamic_loss_scale_args(fp16_dict))


# ---- scenarios: (name, fp16 block, overflow sequence)
def seq(pattern):
    return [c == "X" for c in pattern.replace(" ", "")]


def rand_seq(n, p, seed):
    r = random.Random(seed)
    return [r.random() < p for _ in range(n)]


SCENARIOS = [
    # none of the dynamic keys: class defaults 2**32, window 1000, delayed_shift 1
    ("class_defaults", {"enabled": True, "loss_scale": 0},
     seq("XXX") + [False] * 1005 + seq("X") + [False] * 1001),
    # one key present: DeepSpeed constants apply (2**16, hysteresis 2, window 1000)
    ("ds_defaults", {"enabled": True, "loss_scale": 0, "initial_scale_power": 16},
     seq("X.X.XX") + [False] * 1003 + seq("XX") + [False] * 10),
    # the homework config's fp16 block
    ("homework", {"enabled": True, "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
                  "hysteresis": 2, "min_loss_scale": 1},
     rand_seq(3000, 0.01, 1) ),
    ("hysteresis3", {"enabled": True, "loss_scale": 0, "initial_scale_power": 20, "loss_scale_window": 5,
                     "hysteresis": 3},
     seq("X.X.X.X....X......XX.X.XXX....................X.XX") + rand_seq(300, 0.2, 2)),
    ("consecutive", {"enabled": True, "loss_scale": 0, "initial_scale_power": 20, "loss_scale_window": 5,
                     "hysteresis": 3, "consecutive_hysteresis": True},
     seq("X.X.X.X....X......XX.X.XXX....................X.XX") + rand_seq(300, 0.2, 2)),
    ("window_growth", {"enabled": True, "loss_scale": 0, "initial_scale_power": 4, "loss_scale_window": 3,
                       "hysteresis": 1},
     [False] * 200 + seq("X..X...X....X") + [False] * 100),
    ("min_scale", {"enabled": True, "loss_scale": 0, "initial_scale_power": 5, "loss_scale_window": 4,
                   "hysteresis": 2, "min_loss_scale": 2},
     seq("XX.XXX...XXXX.....") + [True] * 20),
    ("min_scale_fraction", {"enabled": True, "loss_scale": 0, "initial_scale_power": 2, "loss_scale_window": 2,
                            "hysteresis": 1, "min_loss_scale": 0.3},
     seq("XX..XX...") + [True] * 10),
    ("static", {"enabled": True, "loss_scale": 128},
     rand_seq(200, 0.1, 3)),
    ("random_long", {"enabled": True, "loss_scale": 0, "initial_scale_power": 12, "loss_scale_window": 7,
                     "hysteresis": 2},
     rand_seq(2000, 0.08, 4)),
]


def trace(name, fp16, overflows):
    s = build(fp16)
    lines = []
    cfg = " ".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in fp16.items() if k != "enabled")
    lines.append(f"config {cfg}")
    if s.dynamic:
        lines.append(f"init 1 {float(s.cur_scale)!r} {s.scale_window} {s.delayed_shift} "
                     f"{int(s.consecutive_hysteresis)} {float(s.min_scale)!r}")
    else:
        lines.append(f"init 0 {float(s.cur_scale)!r} 0 0 0 0.0")
    for i, ov in enumerate(overflows):
        if s.dynamic:
            n_log = len(s.log)
            try:
                s.update_scale(ov)
            except Exception as e:  # noqa: BLE001 - DeepSpeed raises a bare Exception
                lines.append(f"error {i} | {e}")
                break
            msg = s.log[n_log] if len(s.log) > n_log else "-"
            lines.append(f"{i} {int(ov)} {float(s.cur_scale)!r} {s.cur_hysteresis} {s.last_overflow_iter} | {msg}")
        else:
            s.update_scale(ov)
            lines.append(f"{i} {int(ov)} {float(s.cur_scale)!r} 0 0 | -")
    return lines


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "fixtures", "loss_scaler")
    os.makedirs(root, exist_ok=True)
    for name, fp16, ov in SCENARIOS:
        lines = trace(name, fp16, ov)
        with open(os.path.join(root, name + ".txt"), "w") as f:
            f.write(f"# {name}: generated by scripts/make_loss_scaler_fixtures.py (DeepSpeed DynamicLossScaler "
                    f"transcription)\n")
            f.write("\n".join(lines) + "\n")
        print(f"{name}: {len(lines) - 2} steps")


if __name__ == "__main__":
    main()
