#!/usr/bin/env python3
"""
make_label_smoothing_fixtures.py: golden label-smoothed losses and gradients for test/test_label_smoothing.c.

torch is not needed: this file transcribes, in float64 numpy, huggingface/transformers
src/transformers/trainer_pt_utils.py LabelSmoother.__call__ (epsilon, ignore_index -100):
  log_probs = -log_softmax(logits, -1); padding_mask = labels == -100; labels clamped to >= 0;
  nll = log_probs gathered at the label, smoothed = log_probs summed over the vocabulary (float32 sum in HF,
  float64 here), both zeroed on padded rows; n = number of non-padded rows;
  loss = (1 - eps) * nll.sum() / n + eps * smoothed.sum() / (n * V).
The gradient is NOT written from a closed form: it is the central finite difference of that float64 loss
(step 1e-5 per logit; truncation error ~1e-11 relative), so the C side's closed form is checked against an
independent derivation.

Writes test/fixtures/label_smoothing/cases.txt:
  case <name> N V eps
  logits <N*V values>      (float32-representable, written with repr)
  labels <N ints>
  loss <repr>
  grad <N*V values>        (d loss / d logits)
Run: python3 scripts/make_label_smoothing_fixtures.py
"""
import os

import numpy as np


def log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    z = x - m
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def label_smoother(logits, labels, eps, ignore_index=-100):
    log_probs = -log_softmax(logits)
    lab = labels[:, None]
    padding_mask = lab == ignore_index
    lab = np.maximum(lab, 0)
    nll = np.take_along_axis(log_probs, lab, axis=-1)
    smoothed = log_probs.sum(axis=-1, keepdims=True)
    nll = np.where(padding_mask, 0.0, nll)
    smoothed = np.where(padding_mask, 0.0, smoothed)
    n = padding_mask.size - padding_mask.sum()
    nll_loss = nll.sum() / n
    smoothed_loss = smoothed.sum() / (n * log_probs.shape[-1])
    return (1 - eps) * nll_loss + eps * smoothed_loss


def fd_grad(logits, labels, eps, h=1e-5):
    g = np.zeros_like(logits)
    for idx in np.ndindex(*logits.shape):
        xp = logits.copy()
        xm = logits.copy()
        xp[idx] += h
        xm[idx] -= h
        g[idx] = (label_smoother(xp, labels, eps) - label_smoother(xm, labels, eps)) / (2 * h)
    return g


def case(out, name, rng, N, V, eps, scale, ignored):
    logits = (scale * rng.standard_normal((N, V))).astype(np.float32).astype(np.float64)
    labels = rng.integers(0, V, size=N)
    for i in ignored:
        labels[i] = -100
    labels[0] = V - 1  # the last vocabulary entry is a label somewhere
    loss = label_smoother(logits, labels, eps)
    grad = fd_grad(logits, labels, eps)
    out.write(f"case {name} {N} {V} {eps!r}\n")
    out.write("logits " + " ".join(repr(float(v)) for v in logits.ravel()) + "\n")
    out.write("labels " + " ".join(str(int(v)) for v in labels) + "\n")
    out.write(f"loss {float(loss)!r}\n")
    out.write("grad " + " ".join(repr(float(v)) for v in grad.ravel()) + "\n")


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    d = os.path.join(root, "test", "fixtures", "label_smoothing")
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(20)
    with open(os.path.join(d, "cases.txt"), "w") as out:
        case(out, "eps0.1_padded", rng, 6, 7, 0.1, 2.0, [2, 5])
        case(out, "eps0_plain", rng, 4, 9, 0.0, 2.0, [1])
        case(out, "eps0.5_wide", rng, 4, 33, 0.5, 5.0, [])
        case(out, "eps0.9_sharp", rng, 3, 16, 0.9, 8.0, [1])


if __name__ == "__main__":
    main()
