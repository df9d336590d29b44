#!/usr/bin/env python3
"""check_hf_load.py SAVED_DIR FIXTURE_DIR: transformers loads a checkpoint written by t5train
(model/t5_weights.c t5_weights_save) and its weights equal the fixture checkpoint it came from.
Run where torch + transformers exist (the device machine); prints one line per check, exits 1 on failure."""
import sys

import torch
from transformers import T5ForConditionalGeneration


def main():
    saved, ref = sys.argv[1], sys.argv[2]
    a = T5ForConditionalGeneration.from_pretrained(saved, dtype=torch.float32)
    b = T5ForConditionalGeneration.from_pretrained(ref, dtype=torch.float32)
    sa, sb = a.state_dict(), b.state_dict()
    bad = [n for n in sb if n not in sa or not torch.equal(sa[n], sb[n])]
    print(f"loaded {saved}: {len(sa)} tensors, tied lm_head {a.lm_head.weight.data_ptr() == a.shared.weight.data_ptr()}, "
          f"{len(bad)} differ from {ref}: {bad[:5]}")
    ids = torch.tensor([[5, 6, 7, 1]])
    la = a(input_ids=ids, labels=ids).loss.item()
    lb = b(input_ids=ids, labels=ids).loss.item()
    print(f"loss saved {la:.7f} fixture {lb:.7f}")
    sys.exit(1 if bad or la != lb else 0)


if __name__ == "__main__":
    main()
