#!/usr/bin/env python3
"""zenflow_numpy.py: a numpy transcription of DeepSpeed's ZenFlow optimizer (one rank, ZeRO stage 1/2 with
offload_optimizer cpu, overlap_step false, a fixed update_interval), written from DeepSpeed's own code, and the
fixture test/test_zenflow_numpy.c checks t5train's CPU half (src/zero/zenflow_{select,sched,ref}.c) against.

    python3 scripts/zenflow_numpy.py --out test/fixtures/zenflow/numpy_case.json

What it transcribes (DeepSpeed master of 2026-08-22, 0.19.6-dev; file names as in the repository):
  runtime/zenflow/zenflow_stage_1_and_2.py
    backward_prologue: micro_step += 1; at a selection boundary sync_fp32_param_from_gpu (master = the working
        weights, except at micro_step 0) and the selective optimizer's clear_selected_mv (exp_avg, exp_avg_sq = 0;
        its "step" goes on)
    is_zenflow_select_boundary: (m - W) >= 0 and ((m - W) == 0 or (S != 0 and m % S == 0))
    update_selected_channels: a 2-D weight (R, C): column c = W[:, c]; importance = sum over the column of |grad|;
        torch.topk of int(topk_ratio * C) columns, then sorted ascending (1-D weights are not ranked)
    _process_selected_fp32_groups_grad (micro_step >= W): the selected columns' gradient; if this micro-step is
        not an update boundary the selective AdamW steps work[:, sel] now (group_step), otherwise work[:, sel] is
        kept aside (temp_copy_param); 1-D weights: every element is "selected"
  runtime/zenflow/engine.py
    is_zenflow_update_boundary (fixed interval k): n < W, or (n - W) % k == 0, or (S != 0 and n % S == 0),
        n = micro_steps + 1
    zenflow_step: at a boundary with n >= W, selective_optimizer_step after the CPU step
  ops/adam/zenflow_torch_adam.py ZenFlowSelectiveAdamW._step_without_offload: work[:, sel] = the kept values (if
        any), then torch's AdamW on them with the selected gradient (its own step count, from 1)
  the ZeRO-Offload path: every micro-step's gradient is accumulated into the fp32 host buffer; at a boundary the
        CPU Adam steps the fp32 master with step_id = micro_step + 1 (ZenFlowZeroOptimizerSequential) and the
        working weights take the master
The gradients here are the ones the optimizer is handed (DeepSpeed has already divided the loss by
gradient_accumulation_steps = update_interval); constant lr, no clipping, no loss scale, fp32. Ties in top-k are
avoided by construction (each step's column scales are distinct), since torch.topk leaves their order open.
AdamW (torch's and DeepSpeed's CPU Adam, adamw_mode): p *= 1 - lr * wd; m = b1 m + (1 - b1) g;
v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps); computed here in float64.
"""
import argparse
import json
import os

import numpy as np

LR, WD, B1, B2, EPS = 1e-2, 0.01, 0.9, 0.999, 1e-8


def adamw(p, g, m, v, t):
    """One AdamW step in place on float64 arrays (t: the step, from 1)."""
    p *= 1.0 - LR * WD
    m *= B1
    m += (1.0 - B1) * g
    v *= B2
    v += (1.0 - B2) * g * g
    p -= LR / (1.0 - B1 ** t) * m / (np.sqrt(v) / np.sqrt(1.0 - B2 ** t) + EPS)


class Tensor:
    """One weight as DeepSpeed's ZenFlow holds it: the working copy (the GPU's), the CPU Adam's fp32 master with its
    m and v, the host gradient accumulator, the selected columns and the selective AdamW's state."""

    def __init__(self, w0, topk_ratio):
        self.is_1d = w0.ndim == 1
        self.work = w0.astype(np.float64).copy()
        self.master = self.work.copy()
        self.m = np.zeros_like(self.work)
        self.v = np.zeros_like(self.work)
        self.acc = np.zeros_like(self.work)
        self.k = w0.size if self.is_1d else int(topk_ratio * w0.shape[1])
        self.sel = None  # ascending column indices (2-D)
        self.sm = self.sv = None  # the selective AdamW's exp_avg / exp_avg_sq, shaped like work[:, sel]
        self.steps = 0  # its state["step"]
        self.kept = None  # temp_selected_param

    def view(self):  # work[:, sel] (a copy) or the whole 1-D tensor
        return self.work.copy() if self.is_1d else self.work[:, self.sel].copy()

    def put(self, x):
        if self.is_1d:
            self.work[:] = x
        else:
            self.work[:, self.sel] = x

    def grad_sel(self, g):
        return g.copy() if self.is_1d else g[:, self.sel].copy()

    def selective_adamw(self, g):
        p = self.view()
        if self.kept is not None:
            p = self.kept
            self.kept = None
        if self.sm is None:  # the state is made on the first step: zeros, step 0
            self.sm, self.sv = np.zeros_like(p), np.zeros_like(p)
        self.steps += 1
        adamw(p, self.grad_sel(g), self.sm, self.sv, self.steps)
        self.put(p)


def run(tensors, grads, opts):
    """grads[m][i]: tensor i's gradient at micro-step m. Returns the per-step plan and the tensors."""
    W, S, K = opts["full_warm_up_rounds"], opts["select_interval"], opts["update_interval"]
    plan = []
    for m, gs in enumerate(grads):
        n = m + 1
        select = (m - W) >= 0 and ((m - W) == 0 or (S != 0 and m % S == 0))
        update = n < W or (n - W) % K == 0 or (S != 0 and n % S == 0)
        selective = m >= W
        plan.append({"select": select, "update": update, "selective": selective})
        # backward_prologue
        if select:
            for t in tensors:
                if m != 0:
                    t.master = t.work.copy()
                if t.sm is not None:
                    t.sm[:] = 0.0
                    t.sv[:] = 0.0
        # the backward's reduction: selection, the selected gradients, the host accumulation
        for t, g in zip(tensors, gs):
            if select and not t.is_1d:
                imp = np.abs(g).sum(axis=0)  # per column
                top = np.argsort(-imp, kind="stable")[:t.k]
                t.sel = np.sort(top)
                if t.sm is not None:  # the moments are per selected position: same shape, zeroed above
                    t.sm, t.sv = np.zeros((g.shape[0], t.k)), np.zeros((g.shape[0], t.k))
            t.acc += g
            if selective:
                if not update:
                    t.selective_adamw(g)  # group_step
                else:
                    t.kept = t.view()  # temp_copy_param
        # the engine's step
        if update:
            for t in tensors:
                adamw(t.master, t.acc, t.m, t.v, n)  # CPU Adam, step_id = micro_step + 1
                t.work = t.master.copy()
                t.acc[:] = 0.0
            if n >= W:
                for t, g in zip(tensors, gs):
                    if selective:
                        t.selective_adamw(g)
    return plan


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    R, C, N1, STEPS = 3, 8, 5, 14
    opts = {"topk_ratio": 0.25, "select_strategy": "step", "select_interval": 4, "update_interval": 2,
            "full_warm_up_rounds": 1}
    w2 = rng.normal(0.0, 0.5, (R, C)).astype(np.float32)
    w1 = rng.normal(0.0, 0.5, (N1,)).astype(np.float32)
    grads = []
    for m in range(STEPS):
        scale = rng.permutation(C).astype(np.float64) + 1.0  # distinct column scales: no ties in top-k
        g2 = (rng.normal(0.0, 1e-2, (R, C)) * scale).astype(np.float32)
        g1 = rng.normal(0.0, 1e-2, (N1,)).astype(np.float32)
        grads.append([g2, g1])
    tensors = [Tensor(w2, opts["topk_ratio"]), Tensor(w1, opts["topk_ratio"])]
    plan = run(tensors, [[g.astype(np.float64) for g in gs] for gs in grads], opts)
    out = {"about": "scripts/zenflow_numpy.py: DeepSpeed ZenFlow transcribed in numpy (float64), one rank",
           "lr": LR, "weight_decay": WD, "betas": [B1, B2], "eps": EPS, "opts": opts,
           "shapes": [[R, C], [N1]], "w0": [w2.tolist(), w1.tolist()],
           "grads": [[g.tolist() for g in gs] for gs in grads], "plan": plan,
           "final_work": [t.work.tolist() for t in tensors], "final_master": [t.master.tolist() for t in tensors],
           "final_sel": [t.sel.tolist() if t.sel is not None else None for t in tensors]}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f)
    print(f"zenflow_numpy: {STEPS} micro-steps, plan "
          + " ".join(("S" if p["select"] else "") + ("U" if p["update"] else "") + ("s" if p["selective"] else "")
                     or "-" for p in plan) + f" -> {a.out}")


if __name__ == "__main__":
    main()
