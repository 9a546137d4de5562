#!/usr/bin/env python3
"""Packs what tools/train/dflash_distill.py needs on the GPU machine, small enough to travel
beside the repository (the target itself travels as models/onebit-20m-q8_0.gguf): the training and
held-out token streams per domain (documents joined by <|endoftext|>, uint16) and the shipped
drafter's (and MTP head's, for a reference measurement) fp16 export.

  python3 tools/train/dflash_pack.py --rows train.jsonl.xz --ids train_ids.jsonl \
      --held-rows heldout.jsonl.xz --held-ids heldout_ids.jsonl --dflash EXPORT/dflash \
      [--mtp EXPORT/mtp] --out PACK

Token ids come from `1bit tokenize --jsonl` of the rows' texts (prepare_data.py's output).
"""
import argparse
import json
import lzma
import os
import shutil

import numpy as np

EOT = 8187


def streams(rows_path, ids_path):
    doms = [json.loads(l)["domain"] for l in lzma.open(rows_path, "rt", encoding="utf-8")]
    ids = [json.loads(l)["ids"] for l in open(ids_path)]
    assert len(doms) == len(ids), (rows_path, len(doms), ids_path, len(ids))
    out = {}
    for d, x in zip(doms, ids):
        out.setdefault(d, []).extend(x + [EOT])
    return {k: np.asarray(v, dtype=np.uint16) for k, v in out.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--held-rows", required=True)
    ap.add_argument("--held-ids", required=True)
    ap.add_argument("--dflash", required=True)
    ap.add_argument("--mtp")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    arrs = {"train_" + k: v for k, v in streams(a.rows, a.ids).items()}
    arrs.update({"held_" + k: v for k, v in streams(a.held_rows, a.held_ids).items()})
    np.savez_compressed(os.path.join(a.out, "streams.npz"), **arrs)
    for name, src in (("dflash", a.dflash), ("mtp", a.mtp)):
        if src:
            os.makedirs(os.path.join(a.out, name), exist_ok=True)
            for f in ("config.json", "model.safetensors"):
                shutil.copy(os.path.join(src, f), os.path.join(a.out, name, f))
    print({k: len(v) for k, v in arrs.items()})


if __name__ == "__main__":
    main()
