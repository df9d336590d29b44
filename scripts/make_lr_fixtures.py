#!/usr/bin/env python3
"""
make_lr_fixtures.py: golden learning rates for test/test_lr_schedule.c.

torch and DeepSpeed are not needed: this file transcribes
  - huggingface/transformers src/transformers/optimization.py: the _get_*_lr_lambda functions behind
    get_scheduler("linear" | "cosine" | "cosine_with_restarts" | "polynomial" | "constant" |
    "constant_with_warmup"), and training_args.py TrainingArguments.get_warmup_steps;
  - torch.optim.lr_scheduler.LambdaLR: the constructor does one step() (last_epoch -1 -> 0) and sets
    lr = base_lr * lmbda(0); every scheduler.step() does last_epoch += 1 and lr = base_lr * lmbda(last_epoch);
  - microsoft/DeepSpeed deepspeed/runtime/lr_schedules.py WarmupLR / WarmupDecayLR (commit 38327e07f6cd):
    warmup_num_steps = max(2, n), the constructor writes get_lr() (min_lrs at last_batch_iteration -1)
    into the optimizer, step() does last_batch_iteration += 1 then writes get_lr().
The trainer loop is simulated: for each optimizer update u, record the lr in the param group (the lr
that update uses), then step the scheduler (DeepSpeed engine.py _take_model_step / HF Trainer order).

Writes test/fixtures/lr/schedules.txt:
  case <name> <type> key=value ...
  <u> <lr repr>
Run: python3 scripts/make_lr_fixtures.py
"""
import math
import os


# ---- transformers/optimization.py lambdas
def constant_lambda(_=None):
    return 1


def constant_with_warmup_lambda(current_step, *, num_warmup_steps):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1.0, num_warmup_steps))
    return 1.0


def linear_lambda(current_step, *, num_warmup_steps, num_training_steps):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))


def cosine_lambda(current_step, *, num_warmup_steps, num_training_steps, num_cycles):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))


def cosine_restarts_lambda(current_step, *, num_warmup_steps, num_training_steps, num_cycles):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
    if progress >= 1.0:
        return 0.0
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((float(num_cycles) * progress) % 1.0))))


def polynomial_lambda(current_step, *, num_warmup_steps, num_training_steps, lr_end, power, lr_init):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    elif current_step > num_training_steps:
        return lr_end / lr_init
    else:
        lr_range = lr_init - lr_end
        decay_steps = num_training_steps - num_warmup_steps
        pct_remaining = 1 - (current_step - num_warmup_steps) / decay_steps
        decay = lr_range * pct_remaining**power + lr_end
        return decay / lr_init


def get_warmup_steps(warmup_steps, warmup_ratio, num_training_steps):
    # transformers 5.x: warmup_steps may be a ratio < 1; 4.x: warmup_steps > 0 wins over warmup_ratio
    if warmup_steps >= 1:
        return int(warmup_steps)
    if warmup_steps > 0:
        return math.ceil(num_training_steps * warmup_steps)
    return math.ceil(num_training_steps * warmup_ratio)


class LambdaLR:  # torch.optim.lr_scheduler.LambdaLR, one param group
    def __init__(self, base_lr, lmbda):
        self.base_lr, self.lmbda, self.last_epoch = base_lr, lmbda, -1
        self.step()

    def step(self):
        self.last_epoch += 1
        self.lr = self.base_lr * self.lmbda(self.last_epoch)


# ---- deepspeed/runtime/lr_schedules.py
class WarmupLR:
    def __init__(self, warmup_min_lr=0.0, warmup_max_lr=0.001, warmup_num_steps=1000, warmup_type="log",
                 last_batch_iteration=-1):
        self.min_lr, self.max_lr = warmup_min_lr, warmup_max_lr
        self.delta_lr = self.max_lr - self.min_lr
        self.warmup_num_steps = max(2, warmup_num_steps)
        self.warmup_type = warmup_type
        self.inverse_log_warm_up = 1.0 / math.log(self.warmup_num_steps)
        self.last_batch_iteration = last_batch_iteration
        if last_batch_iteration == -1:
            self.lr = self.get_lr()

    def get_lr(self):
        if self.last_batch_iteration < 0:
            return self.min_lr
        gamma = self._get_gamma()
        return self.min_lr + (self.delta_lr * gamma)

    def step(self):
        self.last_batch_iteration = self.last_batch_iteration + 1
        self.lr = self.get_lr()

    def _get_gamma(self):
        if self.last_batch_iteration < self.warmup_num_steps:
            if self.warmup_type == "log":
                return self.inverse_log_warm_up * math.log(self.last_batch_iteration + 1)
            elif self.warmup_type == "linear":
                return self.last_batch_iteration / self.warmup_num_steps
        return 1.0


class WarmupDecayLR(WarmupLR):
    def __init__(self, total_num_steps, warmup_min_lr=0.0, warmup_max_lr=0.001, warmup_num_steps=1000,
                 warmup_type="log", last_batch_iteration=-1):
        self.total_num_steps = total_num_steps
        super().__init__(warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type, last_batch_iteration)

    def _get_gamma(self):
        if self.last_batch_iteration < self.warmup_num_steps:
            if self.warmup_type == "log":
                return self.inverse_log_warm_up * math.log(self.last_batch_iteration + 1)
            elif self.warmup_type == "linear":
                return self.last_batch_iteration / self.warmup_num_steps
        return max(0.0, float(self.total_num_steps - self.last_batch_iteration) /
                   float(max(1.0, self.total_num_steps - self.warmup_num_steps)))


def hf(type_, lr, N, W, **kw):
    if type_ == "linear":
        f = lambda t: linear_lambda(t, num_warmup_steps=W, num_training_steps=N)  # noqa: E731
    elif type_ == "cosine":
        c = kw.get("num_cycles", 0.5)
        f = lambda t: cosine_lambda(t, num_warmup_steps=W, num_training_steps=N, num_cycles=c)  # noqa: E731
    elif type_ == "cosine_with_restarts":
        c = kw.get("num_cycles", 1)
        f = lambda t: cosine_restarts_lambda(t, num_warmup_steps=W, num_training_steps=N, num_cycles=c)  # noqa: E731
    elif type_ == "polynomial":
        e, p = kw.get("lr_end", 1e-7), kw.get("power", 1.0)
        f = lambda t: polynomial_lambda(t, num_warmup_steps=W, num_training_steps=N, lr_end=e, power=p,  # noqa: E731
                                        lr_init=lr)
    elif type_ == "constant":
        f = constant_lambda
    elif type_ == "constant_with_warmup":
        f = lambda t: constant_with_warmup_lambda(t, num_warmup_steps=W)  # noqa: E731
    else:
        raise ValueError(type_)
    return LambdaLR(lr, f)


CASES = [
    # name, type, params, number of updates to record
    ("linear_w0", "linear", dict(lr=5e-5, N=100, W=0), 110),
    ("linear_w10", "linear", dict(lr=3e-5, N=200, W=10), 210),
    ("linear_ratio", "linear", dict(lr=1e-3, N=37, W=get_warmup_steps(0, 0.1, 37)), 40),        # ceil(3.7)=4
    ("linear_ratio5x", "linear", dict(lr=1e-3, N=50, W=get_warmup_steps(0.06, 0, 50)), 55),     # ceil(3.0)=3
    ("linear_w_gt_n", "linear", dict(lr=1e-4, N=5, W=8), 12),
    ("cosine_w0", "cosine", dict(lr=5e-5, N=100, W=0), 105),
    ("cosine_w7", "cosine", dict(lr=2e-4, N=333, W=7), 340),
    ("cosine_c2", "cosine", dict(lr=1e-3, N=60, W=5, num_cycles=2.0), 64),
    ("cosine_restarts", "cosine_with_restarts", dict(lr=1e-3, N=120, W=10, num_cycles=3), 125),
    ("polynomial", "polynomial", dict(lr=1e-3, N=100, W=10, lr_end=1e-6, power=2.0), 110),
    ("polynomial_default", "polynomial", dict(lr=5e-5, N=50, W=0), 55),
    ("constant", "constant", dict(lr=5e-5, N=10, W=3), 10),
    ("constant_w5", "constant_with_warmup", dict(lr=5e-5, N=0, W=5), 12),
    ("ds_warmup_log", "WarmupLR", dict(warmup_min_lr=0.0, warmup_max_lr=3e-5, warmup_num_steps=500), 520),
    ("ds_warmup_log_min", "WarmupLR", dict(warmup_min_lr=1e-6, warmup_max_lr=1e-4, warmup_num_steps=10), 20),
    ("ds_warmup_linear", "WarmupLR", dict(warmup_min_lr=0.0, warmup_max_lr=1e-3, warmup_num_steps=50,
                                          warmup_type="linear"), 60),
    ("ds_warmup_one", "WarmupLR", dict(warmup_min_lr=0.0, warmup_max_lr=1e-3, warmup_num_steps=1), 6),
    ("ds_warmup_zero", "WarmupLR", dict(warmup_min_lr=0.0, warmup_max_lr=1e-3, warmup_num_steps=0,
                                        warmup_type="linear"), 6),
    ("ds_decay_log", "WarmupDecayLR", dict(total_num_steps=300, warmup_min_lr=0.0, warmup_max_lr=3e-5,
                                           warmup_num_steps=30), 310),
    ("ds_decay_linear", "WarmupDecayLR", dict(total_num_steps=120, warmup_min_lr=1e-5, warmup_max_lr=5e-4,
                                              warmup_num_steps=20, warmup_type="linear"), 125),
    ("ds_decay_total_lt_warmup", "WarmupDecayLR", dict(total_num_steps=5, warmup_min_lr=0.0, warmup_max_lr=1e-3,
                                                       warmup_num_steps=8), 12),
]


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "fixtures", "lr")
    os.makedirs(root, exist_ok=True)
    out = ["# generated by scripts/make_lr_fixtures.py: lr used by optimizer update u (0-based)"]
    for name, type_, params, n in CASES:
        if type_ in ("WarmupLR", "WarmupDecayLR"):
            s = (WarmupLR if type_ == "WarmupLR" else WarmupDecayLR)(**params)
        else:
            p = dict(params)
            s = hf(type_, p.pop("lr"), p.pop("N"), p.pop("W"), **p)
        kv = " ".join(f"{k}={v!r}" if not isinstance(v, str) else f"{k}={v}" for k, v in params.items())
        out.append(f"case {name} {type_} {kv}")
        for u in range(n):
            out.append(f"{u} {float(s.lr)!r}")
            s.step()
    with open(os.path.join(root, "schedules.txt"), "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"{len(CASES)} cases, {len(out)} lines")


if __name__ == "__main__":
    main()
