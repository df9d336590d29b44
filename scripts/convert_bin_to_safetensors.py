#!/usr/bin/env python3
"""convert_bin_to_safetensors.py DIR [--out OUT_DIR]: turn a PyTorch-only T5 checkpoint (pytorch_model.bin, or
pytorch_model.bin.index.json + shards) into the safetensors files t5train reads (model.safetensors, or
model-0000N-of-0000M.safetensors + model.safetensors.index.json for sharded inputs). Needs torch + safetensors.

Tied duplicates are dropped the way transformers' save_pretrained does (encoder/decoder.embed_tokens.weight
are the same tensor as shared.weight; lm_head.weight too when it equals shared.weight), so the result loads in
transformers and in t5train. Tensors keep their stored dtype. Files are written to a temporary name and renamed.
"""
import argparse
import json
import os
import sys


def load_bin(path):
    import torch
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:  # torch < 1.13
        return torch.load(path, map_location="cpu")


def clean(sd, shared=None):
    """Drop tied duplicates; make every tensor contiguous and storage-independent (safetensors refuses shared
    storage)."""
    import torch
    out = {}
    ref = sd.get("shared.weight", shared)
    for name, t in sd.items():
        if not isinstance(t, torch.Tensor):
            continue
        if name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight") and ref is not None \
                and t.shape == ref.shape and torch.equal(t, ref):
            continue
        if name == "lm_head.weight" and ref is not None and t.shape == ref.shape and torch.equal(t, ref):
            continue
        if name == "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight":
            continue  # unused by T5 (HF ignores it on load)
        out[name] = t.detach().contiguous().clone()
    return out


def save(tensors, path):
    from safetensors.torch import save_file
    tmp = path + ".tmp.%d" % os.getpid()
    save_file(tensors, tmp, metadata={"format": "pt"})
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="checkpoint directory holding pytorch_model.bin(.index.json)")
    ap.add_argument("--out", help="output directory (default: the same directory)")
    args = ap.parse_args()
    src = args.dir
    out = args.out or src
    os.makedirs(out, exist_ok=True)
    single = os.path.join(src, "pytorch_model.bin")
    index = os.path.join(src, "pytorch_model.bin.index.json")
    if os.path.exists(single):
        sd = clean(load_bin(single))
        save(sd, os.path.join(out, "model.safetensors"))
        print(f"wrote {os.path.join(out, 'model.safetensors')}: {len(sd)} tensors")
    elif os.path.exists(index):
        with open(index) as f:
            idx = json.load(f)
        files = sorted(set(idx["weight_map"].values()))
        shared = None
        if "shared.weight" in idx["weight_map"]:
            shared = load_bin(os.path.join(src, idx["weight_map"]["shared.weight"]))["shared.weight"]
        weight_map, total = {}, 0
        n = len(files)
        for i, fn in enumerate(files):
            sd = clean(load_bin(os.path.join(src, fn)), shared)
            name = "model-%05d-of-%05d.safetensors" % (i + 1, n)
            save(sd, os.path.join(out, name))
            for k, t in sd.items():
                weight_map[k] = name
                total += t.numel() * t.element_size()
            print(f"wrote {name}: {len(sd)} tensors")
        tmp = os.path.join(out, "model.safetensors.index.json.tmp")
        with open(tmp, "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
        os.replace(tmp, os.path.join(out, "model.safetensors.index.json"))
    else:
        sys.exit(f"convert_bin_to_safetensors: error: no pytorch_model.bin or pytorch_model.bin.index.json in {src}")
    if out != src and os.path.exists(os.path.join(src, "config.json")):
        import shutil
        for fn in ("config.json", "generation_config.json", "spiece.model", "tokenizer.json",
                   "tokenizer_config.json", "special_tokens_map.json"):
            if os.path.exists(os.path.join(src, fn)):
                shutil.copy(os.path.join(src, fn), os.path.join(out, fn))
    print(f"done: ./t5train --model {out}")


if __name__ == "__main__":
    main()
