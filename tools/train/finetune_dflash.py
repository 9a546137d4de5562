#!/usr/bin/env python3
"""Continues training an exported DFlash drafter against its frozen exported target (fp16
weights, as shipped), on the CPU or GPU. Used after the GPU run to train the drafter with the
last-context input (DflashConfig.add_last_context), starting from the jointly trained weights.
Token ids come from `1bit tokenize --jsonl` (identical to HF tokenizers on this vocabulary).

  python3 tools/train/finetune_dflash.py --export EXPORT --rows train.jsonl.xz --ids ids.jsonl \
      --out DIR [--seconds S]
"""
import argparse
import json
import lzma
import os
import shutil
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export as E  # noqa: E402
import model as M   # noqa: E402
import train as TR  # noqa: E402

SEED = 4321


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--export", required=True)
    ap.add_argument("--rows", required=True, help="train.jsonl.xz (for the domains)")
    ap.add_argument("--ids", required=True, help="token ids of the same rows, one {'ids'} line each")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=1800)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--anchors", type=int, default=48)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--code-share", type=float, default=0.5)
    args = ap.parse_args()
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    fam = E.load_family(args.export)
    target = fam.target
    for p in target.parameters():
        p.requires_grad_(False)
    fc = M.DflashConfig(block_size=fam.fc.block_size, n_layers=fam.fc.n_layers,
                        target_layers=fam.fc.target_layers, add_last_context=True)
    df = M.DflashDrafter(target.c, fc)
    df.load_state_dict(fam.dflash.state_dict())
    df.train()
    eot = 8187
    rows = [json.loads(l)["domain"] for l in lzma.open(args.rows, "rt", encoding="utf-8")]
    ids = [json.loads(l)["ids"] for l in open(args.ids)]
    code, rest = [], []
    for dom, x in zip(rows, ids):
        (code if dom == "code" else rest).extend(x + [eot])
    streams = [torch.tensor(code), torch.tensor(rest)]
    opt = torch.optim.AdamW(df.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    ew = target.model.embed_tokens.weight
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "finetune_log.txt"), "a")
    t0, step, avg = time.time(), 0, None
    bs = fc.block_size
    while time.time() - t0 < args.seconds:
        xs = []
        for _ in range(args.batch):
            s = streams[0] if torch.rand(1, generator=gen).item() < args.code_share else streams[1]
            i = torch.randint(0, len(s) - args.seq - 1, (1,), generator=gen).item()
            xs.append(s[i:i + args.seq])
        x = torch.stack(xs).long()
        with torch.no_grad():
            _, h, feats = target(x, keep_layers=set(fc.target_layers))
        anchors = torch.randperm(args.seq - bs, generator=gen)[:args.anchors].sort().values + 1
        pos = anchors[:, None] + torch.arange(1, bs)[None, :]
        with torch.no_grad():
            teach = target.lm_head(target.model.norm(h[:, pos - 1]))          # [B, A, bs-1, V]
        dl = df(feats, x, anchors, ew, ew)[:, :, 1:]
        lab = x[:, pos]
        w = torch.exp(-torch.arange(bs - 1, dtype=torch.float32) / 4)
        w = w / w.sum()
        loss, ces = 0, []
        for j in range(bs - 1):
            l, ce = TR.drafter_loss(dl[:, :, j].reshape(-1, dl.shape[-1]), lab[:, :, j].reshape(-1),
                                    teach[:, :, j].reshape(-1, dl.shape[-1]))
            loss = loss + w[j] * l
            ces.append(ce.item())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(df.parameters(), 1.0)
        opt.step()
        step += 1
        avg = ces if avg is None else [0.98 * a + 0.02 * c for a, c in zip(avg, ces)]
        if step % 20 == 0:
            msg = f"step {step} {time.time() - t0:.0f}s ce by position " + " ".join(f"{c:.2f}" for c in avg)
            print(msg, flush=True)
            log.write(msg + "\n")
            log.flush()
        if step % 100 == 0:
            save(df, fc, args.export, args.out)
    save(df, fc, args.export, args.out)


def save(df, fc, export_dir, out):
    shutil.copy(os.path.join(export_dir, "dflash", "config.json"), os.path.join(out, "config.json"))
    cfg = json.load(open(os.path.join(out, "config.json")))
    cfg["add_last_context"] = fc.add_last_context
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
    E.write_safetensors(os.path.join(out, "model.safetensors.tmp"), E.dflash_tensors(df), {"format": "pt"})
    os.replace(os.path.join(out, "model.safetensors.tmp"), os.path.join(out, "model.safetensors"))


if __name__ == "__main__":
    main()
