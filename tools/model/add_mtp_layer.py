#!/usr/bin/env python3
"""Gives a tiny hybrid checkpoint (tests/golden/model/tiny-qwen3next, tiny-qwen3_5, tiny-qwen3_5moe)
the multi-token-prediction layer that the released Qwen3-Next / Qwen3.5 checkpoints carry, with
random weights (seeded), so `1bit convert` writes nextn layers and `1bit serve --mtp` can be tested
on it. Hugging Face transformers ignores `mtp.*` when it loads these classes, so the goldens made
from the checkpoint (golden.json) stay valid.

The layout is the released checkpoints' (vLLM qwen3_next_mtp.py reads it):
  mtp.fc.weight [hidden, 2 hidden]                   eh_proj of [embedding; hidden]
  mtp.pre_fc_norm_embedding.weight, mtp.pre_fc_norm_hidden.weight, mtp.norm.weight [hidden]
  mtp.layers.0.*                                      one full-attention decoder layer, named and
                                                      shaped as the model's own full-attention layers
Weights are drawn at the scales make_family_goldens.py gives the model's own (norms are zero-centred,
x * (1 + w), drawn around 0 so they are not trivial).

Stdlib only: python3 tools/model/add_mtp_layer.py tests/golden/model/tiny-qwen3next
"""
import json
import math
import random
import struct
import sys
from pathlib import Path


def read_safetensors(path):
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", None)
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {info['dtype']}; this tool writes F32 checkpoints only")
        b, e = info["data_offsets"]
        tensors[name] = (info["shape"], data[base + b:base + e])
    return tensors, meta


def write_safetensors(path, tensors, meta):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        shape, blob = tensors[name]
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    if meta is not None:
        header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def floats(rng, n, std):
    return struct.pack(f"<{n}f", *(rng.gauss(0.0, std) for _ in range(n)))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = Path(sys.argv[1])
    cfg = json.loads((d / "config.json").read_text())
    tensors, meta = read_safetensors(d / "model.safetensors")
    tensors = {k: v for k, v in tensors.items() if not k.startswith("mtp.")}  # idempotent
    full = cfg["layer_types"].index("full_attention")
    src = f"model.layers.{full}."
    hidden = cfg["hidden_size"]
    rng = random.Random(20261205)
    # the scales of make_family_goldens.py's randomize(): matrices N / sqrt(fan_in), the router 3x,
    # zero-centred norms 0.2 N
    def scale(name, shape):
        if len(shape) == 1:
            return 0.2
        return (3.0 if name.endswith("mlp.gate.weight") else 1.0) / math.sqrt(shape[-1])
    for name in sorted(k for k in list(tensors) if k.startswith(src)):
        shape, _ = tensors[name]
        tensors["mtp.layers.0." + name[len(src):]] = (shape, floats(rng, math.prod(shape), scale(name, shape)))
    tensors["mtp.fc.weight"] = ([hidden, 2 * hidden], floats(rng, 2 * hidden * hidden, scale("fc", [hidden, 2 * hidden])))
    for norm in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        tensors[f"mtp.{norm}.weight"] = ([hidden], floats(rng, hidden, 0.2))
    write_safetensors(d / "model.safetensors", tensors, meta)
    cfg["mtp_num_hidden_layers"] = 1
    (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    print(f"{d}: mtp.* from the shapes of layer {full}, {sum(k.startswith('mtp.') for k in tensors)} tensors")


if __name__ == "__main__":
    main()
