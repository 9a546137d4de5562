"""Golden drafts of the MTP head and the DFlash drafter for the engine's tests
(tests/engine/head_drafters_test.cpp): PyTorch (tools/train/model.py, fp32) on the weights of the
shipped Q8_0 GGUFs, dequantised as tools/train/dflash_distill.py reads them.

For every anchor a of each prompt (token a the last known one, the target's hidden states known
for positions < a) it records what the engine's drafter must propose:
  mtp:    [a, d1, d2, d3]          the head's greedy chain (evaluate.py's greedy passes)
  dflash: [a, d1, ..., d7]         block rows 1..7 of the block at anchor a
with the top-1 softmax probability of each draft (mtp_p, dflash_p) for tests of p_min.

  python3 tools/model/make_drafter_goldens.py --models models --prompts PROMPTS.json --out drafts.json
PROMPTS.json: {"prompts": [[token ids] or "text", ...], "continue": N}: a text is split by greedy
longest match over the GGUF vocabulary (byte-level BPE symbols; not the engine's BPE merges, but any
ids do for goldens), then the target's fp32 greedy continuation of N tokens is appended (the text
speculative decoding verifies).
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
import model as M                                       # noqa: E402
from dflash_distill import read_gguf, target_from_gguf, GGUF_TO_HF   # noqa: E402

MTP_DRAFT = 3


def block_name(rest):
    return GGUF_TO_HF[rest[:-len(".weight")]] + ".weight"


def mtp_from_gguf(path, c):
    meta, ts = read_gguf(path)
    assert meta["general.architecture"] == "qwen3_mtp", meta["general.architecture"]
    sd = {}
    for name, v in ts.items():
        fixed = {"blk.0.nextn.enorm.weight": "enorm.weight", "blk.0.nextn.hnorm.weight": "hnorm.weight",
                 "blk.0.nextn.eh_proj.weight": "eh_proj.weight",
                 "blk.0.nextn.shared_head_norm.weight": "norm.weight"}
        k = fixed.get(name) or "block." + block_name(name.split(".", 2)[2])
        sd[k] = torch.from_numpy(v)
    a = "qwen3_mtp"
    cm = M.Qwen3Config(**{**c.__dict__, "intermediate_size": meta[f"{a}.feed_forward_length"]})
    head = M.MtpHead(cm).eval()
    head.load_state_dict(sd)
    return head


def dflash_from_gguf(path, c):
    meta, ts = read_gguf(path)
    a = "qwen3_dflash"
    assert meta["general.architecture"] == a, meta["general.architecture"]
    d = M.DflashConfig(block_size=meta[f"{a}.block_size"], n_layers=meta[f"{a}.block_count"],
                       target_layers=tuple(meta[f"{a}.target_layers"]),
                       add_last_context=bool(meta.get(f"{a}.add_last_context", False)))
    sd = {}
    for name, v in ts.items():
        fixed = {"dflash.fc.weight": "fc.weight", "dflash.hidden_norm.weight": "hidden_norm.weight",
                 "dflash.mask_embd.weight": "mask_embd", "output_norm.weight": "norm.weight"}
        if name in fixed:
            k = fixed[name]
        else:
            _, i, rest = name.split(".", 2)
            k = f"layers.{i}." + block_name(rest)
        sd[k] = torch.from_numpy(v).reshape(-1) if k == "mask_embd" else torch.from_numpy(v)
    cd = M.Qwen3Config(**{**c.__dict__, "intermediate_size": meta[f"{a}.feed_forward_length"]})
    df = M.DflashDrafter(cd, d).eval()
    df.load_state_dict(sd)
    return df


def byte_symbols():
    """GPT-2 byte-level mapping: byte -> printable symbol."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def greedy_ids(text, vocab):
    sym = byte_symbols()
    s = "".join(sym[b] for b in text.encode("utf-8"))
    index = {t: i for i, t in enumerate(vocab)}   # special tokens (<|im_start|>) are ASCII: as is
    longest = max(len(t) for t in index)
    out, i = [], 0
    while i < len(s):
        for n in range(min(longest, len(s) - i), 0, -1):
            if s[i:i + n] in index:
                out.append(index[s[i:i + n]])
                i += n
                break
        else:
            raise ValueError(f"no token for {s[i]!r}")
    return out


@torch.no_grad()
def continue_greedy(lm, ids, n):
    x = torch.tensor(ids, dtype=torch.long)
    for _ in range(n):
        lg, _, _ = lm(x[None])
        x = torch.cat([x, lg[0, -1].argmax()[None]])
    return x.tolist()


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="models")
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    target = target_from_gguf(os.path.join(args.models, "onebit-20m-q8_0.gguf"))
    mtp = mtp_from_gguf(os.path.join(args.models, "onebit-20m-mtp-q8_0.gguf"), target.c)
    df = dflash_from_gguf(os.path.join(args.models, "onebit-20m-dflash-q8_0.gguf"), target.c)
    ew = target.model.embed_tokens.weight
    out = {"source": "tools/model/make_drafter_goldens.py (tools/train/model.py, fp32, Q8_0 weights dequantised)",
           "mtp_draft": MTP_DRAFT, "block_size": df.d.block_size, "prompts": []}
    spec = json.load(open(args.prompts))
    vocab = read_gguf(os.path.join(args.models, "onebit-20m-q8_0.gguf"))[0]["tokenizer.ggml.tokens"]
    for s in spec["prompts"]:
        s = greedy_ids(s, vocab) if isinstance(s, str) else s
        s = continue_greedy(target, s, spec.get("continue", 0))
        ids = torch.tensor(s, dtype=torch.long)[None]
        L = ids.shape[1]
        _, h, feats = target(ids, keep_layers=set(df.d.target_layers))
        lg = mtp(h, ids, ew, ew, MTP_DRAFT, greedy=True)
        pr = [x[0].float().softmax(-1).max(-1) for x in lg]     # (values, indices) per pass
        rec = {"tokens": s, "mtp": [], "mtp_p": [], "dflash": [], "dflash_p": []}
        for a in range(1, L - MTP_DRAFT + 1):                   # pass k at q = a-1+k < L
            rec["mtp"].append([a] + [int(pr[k][1][a - 1 + k]) for k in range(MTP_DRAFT)])
            rec["mtp_p"].append([round(float(pr[k][0][a - 1 + k]), 5) for k in range(MTP_DRAFT)])
        anchors = torch.arange(1, L)
        blk = df(feats, ids, anchors, ew, ew)[0].float().softmax(-1).max(-1)   # [A, bs]
        for i, a in enumerate(anchors.tolist()):
            bs = df.d.block_size
            rec["dflash"].append([a] + [int(blk[1][i, j]) for j in range(1, bs)])
            rec["dflash_p"].append([round(float(blk[0][i, j]), 5) for j in range(1, bs)])
        out["prompts"].append(rec)
        print(f"prompt of {L} tokens: {len(rec['mtp'])} mtp anchors, {len(rec['dflash'])} dflash anchors")
    with open(args.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
