#!/usr/bin/env python3
"""make_init.py: random-init starting checkpoints for the long-run comparison (issue 27), written by transformers.

    python3 test/bench/long_run/make_init.py --out /tmp/long_run/init --seeds 1 2 3

For each seed and shape, torch.manual_seed(seed) then T5ForConditionalGeneration(config) (transformers' own
_init_weights) and save_pretrained: <out>/<shape>_s<seed>/{config.json, model.safetensors, generation_config.json}.
Both sides of every run load the same folder, so a seed fixes the start of both; the seed is also each
trainer's --seed (shuffle order and dropout, which differ between the two by construction).

Shapes: v10 = t5-small (d_model 512, d_ff 2048, 8 heads of 64, 6+6 layers, relu, tied embeddings);
v11 = t5-v1_1-small / flan-t5-small (d_model 512, d_ff 1024, 6 heads of 64, 8+8 layers, gated-gelu, untied).
Dropout 0.1 in both, as the Hub configs.
"""
import argparse
import os

SHAPES = {
    "v10": dict(d_model=512, d_ff=2048, d_kv=64, num_heads=8, num_layers=6, num_decoder_layers=6,
                feed_forward_proj="relu", tie_word_embeddings=True),
    "v11": dict(d_model=512, d_ff=1024, d_kv=64, num_heads=6, num_layers=8, num_decoder_layers=8,
                feed_forward_proj="gated-gelu", tie_word_embeddings=False),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--shapes", nargs="+", default=sorted(SHAPES))
    a = ap.parse_args()
    import torch
    from transformers import T5Config, T5ForConditionalGeneration
    for shape in a.shapes:
        for seed in a.seeds:
            cfg = T5Config(vocab_size=32128, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                           dropout_rate=0.1, layer_norm_epsilon=1e-6, initializer_factor=1.0,
                           decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, **SHAPES[shape])
            torch.manual_seed(seed)
            model = T5ForConditionalGeneration(cfg)
            d = os.path.join(a.out, f"{shape}_s{seed}")
            model.save_pretrained(d)
            n = sum(p.numel() for p in model.parameters())
            print(f"make_init: {d} ({n / 1e6:.1f}M parameters)")


if __name__ == "__main__":
    main()
