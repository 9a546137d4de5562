#!/usr/bin/env python3
"""Compares the exported target's logits in the native engine with PyTorch on held-out text.

PyTorch runs tools/train/model.py on the exported fp16 weights in fp32 (the weights an F16 GGUF
holds exactly); the engine runs the GGUF through tools/train/engine_logits.cpp (compiled here
against a build directory's static libraries). Token ids come from `1bit tokenize` on the GGUF's
own vocabulary. Prints max|diff| / max|logit|, top-1 agreement and KL per held-out sample, and
whether `1bit run --temp 0` writes PyTorch's greedy text.

  python3 tools/train/compare_logits.py --hf models/src/target --gguf T.gguf --build build \
      --heldout tools/train/data_pack/heldout.jsonl.xz
"""
import argparse
import json
import lzma
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export as E  # noqa: E402

LIBS = ["engine", "model", "backend", "template", "tokenizer", "gguf", "base"]
N_TOKENS = 160


def build_helper(build, out):
    libs = [os.path.join(build, f"libonebit_{l}.a") for l in LIBS]
    src = os.path.join(HERE, "engine_logits.cpp")
    root = os.path.dirname(os.path.dirname(HERE))
    subprocess.run(["g++", "-std=c++20", "-O2", "-I" + os.path.join(root, "src"),
                    "-I" + os.path.join(build, "generated"), src] + libs + ["-lpthread", "-o", out], check=True)


def tokenize(onebit, gguf, texts):
    inp = "".join(json.dumps({"text": t}) + "\n" for t in texts)
    r = subprocess.run([onebit, "tokenize", "-m", gguf, "--jsonl"], input=inp, capture_output=True, text=True, check=True)
    return [json.loads(l)["ids"] for l in r.stdout.splitlines()]


def samples(heldout):
    """One held-out document of each domain."""
    out = {}
    for line in lzma.open(heldout, "rt", encoding="utf-8"):
        r = json.loads(line)
        if r["domain"] not in out and len(r["text"]) > 800:
            out[r["domain"]] = r["text"]
    return out


def kl(p_logits, q_logits):
    p = torch.log_softmax(torch.from_numpy(p_logits).double(), -1)
    q = torch.log_softmax(torch.from_numpy(q_logits).double(), -1)
    return (p.exp() * (p - q)).sum(-1).mean().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", required=True, help="exported target (config.json + model.safetensors)")
    ap.add_argument("--gguf", required=True, nargs="+", help="GGUF files of that target")
    ap.add_argument("--build", required=True, help="CMake build directory (bin/1bit, libonebit_*.a)")
    ap.add_argument("--heldout", required=True)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    onebit = os.path.join(args.build, "bin", "1bit")
    tmp = tempfile.mkdtemp()
    helper = os.path.join(tmp, "engine_logits")
    build_helper(args.build, helper)
    lm = E.load_lm(args.hf)
    texts = samples(args.heldout)
    results = {}
    for gguf in args.gguf:
        ids_all = tokenize(onebit, gguf, list(texts.values()))
        res = {}
        for dom, ids in zip(texts, ids_all):
            ids = ids[:N_TOKENS]
            with open(os.path.join(tmp, "ids.txt"), "w") as f:
                f.write(" ".join(map(str, ids)))
            out = os.path.join(tmp, "logits.f32")
            subprocess.run([helper, gguf, os.path.join(tmp, "ids.txt"), out], check=True)
            eng = np.fromfile(out, dtype=np.float32).reshape(len(ids), -1)
            with torch.no_grad():
                ref = lm(torch.tensor([ids]))[0][0].numpy()
            rel = float(np.abs(eng - ref).max() / np.abs(ref).max())
            top1 = float((eng.argmax(-1) == ref.argmax(-1)).mean())
            res[dom] = {"tokens": len(ids), "max_diff_over_max_logit": rel, "top1_agree": top1, "kl": kl(ref, eng)}
            print(f"{os.path.basename(gguf)} {dom:6s} {len(ids)} tokens: max|diff|/max|logit| {rel:.2e}, "
                  f"top-1 agree {top1:.4f}, KL {res[dom]['kl']:.2e}")
        # Greedy text: 1bit run vs PyTorch (no cache), 48 tokens from a story prompt.
        prompt = "Once upon a time"
        run = subprocess.run([onebit, "run", "-m", gguf, "-p", prompt, "-n", "48", "--temp", "0"],
                             capture_output=True, text=True, check=True).stdout
        x = torch.tensor([tokenize(onebit, gguf, [prompt])[0]])
        with torch.no_grad():
            for _ in range(48):
                x = torch.cat([x, lm(x)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
        ids = x[0].tolist()
        ref_ids = tokenize(onebit, gguf, [run])[0]
        res["greedy_48_identical"] = ref_ids[:len(ids)] == ids
        print(f"{os.path.basename(gguf)} greedy 48 tokens identical to PyTorch: {res['greedy_48_identical']}")
        results[os.path.basename(gguf)] = res
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
