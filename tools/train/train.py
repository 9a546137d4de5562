#!/usr/bin/env python3
"""Trains the whole family in one run: tokenizer, Qwen3 target, MTP head, DFlash drafter and
draft model (jointly: one loop, one batch, the drafters learn from the current target's hidden
states and logits, detached so they never change the target). Then evaluates (evaluate.py),
exports (export.py) and plots. Seeded; everything lands in --out.

  python3 tools/train/train.py --data DIR --out OUT [--preset full|m60|tiny] [--train-seconds S]
"""
import argparse
import copy
import json
import lzma
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402
import tok as T    # noqa: E402

SEED = 1234

PRESETS = {
    # ~20M-parameter target; sizes chosen so that the fp16 export of all four models fits the
    # device tool's 64 MiB return and training is data-bound (a few million tokens) anyway.
    "full": dict(vocab=8192, target=dict(hidden_size=384, intermediate_size=1152, num_hidden_layers=10,
                                         num_attention_heads=6, num_key_value_heads=2, head_dim=64,
                                         max_position_embeddings=1024, dropout=0.1),
                 draft=dict(hidden_size=256, intermediate_size=768, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                            max_position_embeddings=1024, dropout=0.1),
                 dflash=dict(block_size=8, n_layers=2, target_layers=(1, 5, 9), add_last_context=False),
                 seq=1024, batch=16, lr=1.5e-3, epochs=10, anchors=64, eval_every=150),
    # The second GPU run (docs/models.md): longer, DFlash with the last-context input. It
    # overfits the target after ~1,000 steps; the shipped models come from "full".
    "full16": None,
    # CPU smoke test of the same code path.
    "tiny": dict(vocab=512, target=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                        max_position_embeddings=128),
                 draft=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                            num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                            max_position_embeddings=128),
                 dflash=dict(block_size=4, n_layers=1, target_layers=(0, 2)),
                 seq=128, batch=4, lr=3e-3, epochs=1, anchors=8, eval_every=10),
}
PRESETS["full16"] = dict(PRESETS["full"], epochs=16, anchors=128, eval_every=200,
                        dflash=dict(PRESETS["full"]["dflash"], add_last_context=True))
# onebit-60m (docs/models.md, "onebit-60m"): a target whose weights do not fit a core's cache, so
# that its 1-token step streams them from memory and a verification of several tokens costs little
# more (speculative decoding's benchmark, issue 16); "full"'s draft model, DFlash with the
# last-context input and layers spread over 12. The same few million tokens: fewer epochs.
PRESETS["m60"] = dict(PRESETS["full"], lr=1e-3, epochs=5,
                      target=dict(PRESETS["full"]["target"], hidden_size=640, intermediate_size=1792,
                                  num_hidden_layers=12, num_attention_heads=10),
                      dflash=dict(PRESETS["full"]["dflash"], target_layers=(1, 6, 11), add_last_context=True))
KD_WEIGHT = 0.5    # drafters: (1-w) * CE(ground truth) + w * CE(target's distribution)
MTP_PASSES = 3


def log(msg, fh=None):
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    if fh:
        fh.write(line + "\n")
        fh.flush()


def load_rows(path):
    with lzma.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(l) for l in f]


def tokenize(tk, rows):
    """Token stream per domain: documents joined by <|endoftext|>."""
    eot = tk.ids["<|endoftext|>"]
    streams = {}
    ids = tk.encode_batch([r["text"] for r in rows])
    for r, x in zip(rows, ids):
        streams.setdefault(r["domain"], []).extend(x + [eot])
    return {k: torch.tensor(v, dtype=torch.int32) for k, v in streams.items()}


def soft_ce(logits, target_logits):
    return -(target_logits.float().softmax(-1) * logits.float().log_softmax(-1)).sum(-1).mean()


def drafter_loss(logits, labels, teacher):
    """logits/teacher [N, V], labels [N]."""
    ce = F.cross_entropy(logits.float(), labels.long())
    return (1 - KD_WEIGHT) * ce + KD_WEIGHT * soft_ce(logits, teacher), ce


class Family(torch.nn.Module):
    def __init__(self, p, vocab):
        super().__init__()
        self.tc = M.Qwen3Config(vocab_size=vocab, **p["target"])
        self.dc = M.Qwen3Config(vocab_size=vocab, **p["draft"])
        self.fc = M.DflashConfig(**p["dflash"])
        self.target = M.Qwen3LM(self.tc)
        self.mtp = M.MtpHead(self.tc)
        self.dflash = M.DflashDrafter(self.tc, self.fc)
        self.draft = M.Qwen3LM(self.dc)

    def losses(self, x, n_anchors):
        """x [B, T+1] tokens. Returns {name: loss} (sum "total" to step) and plain CE values."""
        ids, y = x[:, :-1], x[:, 1:].long()
        b, t = ids.shape
        logits, h, feats = self.target(ids, keep_layers=set(self.fc.target_layers))
        out = {"target": F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))}
        teach = logits.detach()
        ew = self.target.model.embed_tokens.weight.detach()
        h, feats = h.detach(), {k: v.detach() for k, v in feats.items()}

        # MTP: pass k at q predicts ids[q+2] (= y[q+1]); valid for k <= q <= t-2.
        mtp_logits = self.mtp(h, ids, ew, ew, MTP_PASSES)
        mtp_total = 0
        for k, lg in enumerate(mtp_logits):
            sl = slice(k, t - 1)
            loss, ce = drafter_loss(lg[:, sl].reshape(-1, lg.shape[-1]), y[:, k + 1:].reshape(-1),
                                    teach[:, k + 1:].reshape(-1, lg.shape[-1]))
            mtp_total = mtp_total + loss
            out[f"mtp{k}_ce"] = ce.detach()
        out["mtp"] = mtp_total / MTP_PASSES

        # DFlash: anchors a (same for the batch); block position j >= 1 predicts ids[a+j].
        bs = self.fc.block_size
        anchors = torch.randperm(t - bs, device=x.device)[:n_anchors].sort().values + 1
        dl = self.dflash(feats, ids, anchors, ew, ew)[:, :, 1:]           # [B, A, bs-1, V]
        pos = anchors[:, None] + torch.arange(1, bs, device=x.device)[None, :]   # [A, bs-1]
        lab = ids[:, pos]                                                 # [B, A, bs-1]
        tea = teach[:, pos - 1]                                           # [B, A, bs-1, V]
        w = torch.exp(-torch.arange(bs - 1, device=x.device, dtype=torch.float32) / 4)
        w = w / w.sum()
        dloss = 0
        for j in range(bs - 1):
            loss, ce = drafter_loss(dl[:, :, j].reshape(-1, dl.shape[-1]), lab[:, :, j].reshape(-1),
                                    tea[:, :, j].reshape(-1, dl.shape[-1]))
            dloss = dloss + w[j] * loss
            if j in (0, 3):
                out[f"dflash{j + 1}_ce"] = ce.detach()
        out["dflash"] = dloss

        # Draft model: an ordinary LM, also distilled from the target.
        dlg, _, _ = self.draft(ids)
        loss, ce = drafter_loss(dlg.reshape(-1, dlg.shape[-1]), y.reshape(-1), teach.reshape(-1, dlg.shape[-1]))
        out["draft"], out["draft_ce"] = loss, ce.detach()
        out["total"] = out["target"] + out["mtp"] + out["dflash"] + out["draft"]
        return out


@torch.no_grad()
def heldout_loss(fam, streams, seq, device, max_chunks=24):
    """Mean next-token CE of the target and draft model per held-out domain."""
    fam.eval()
    res = {}
    for dom, s in streams.items():
        n = min(max_chunks, (len(s) - 1) // seq)
        if n == 0:
            continue
        x = s[: n * seq + 1]
        ids = torch.stack([x[i * seq:(i + 1) * seq] for i in range(n)]).long().to(device)
        y = torch.stack([x[i * seq + 1:(i + 1) * seq + 1] for i in range(n)]).long().to(device)
        with autocast(device):
            lt, _, _ = fam.target(ids)
            ld, _, _ = fam.draft(ids)
        res[dom] = F.cross_entropy(lt.float().reshape(-1, lt.shape[-1]), y.reshape(-1)).item()
        res["draft/" + dom] = F.cross_entropy(ld.float().reshape(-1, ld.shape[-1]), y.reshape(-1)).item()
    fam.train()
    return res


def autocast(device):
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def param_groups(fam):
    decay, no_decay = [], []
    for n, p in fam.named_parameters():
        (decay if p.dim() >= 2 and "embed" not in n else no_decay).append(p)
    return [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", default="full", choices=PRESETS)
    ap.add_argument("--train-seconds", type=float, default=330)
    ap.add_argument("--eval-seconds", type=float, default=90)
    ap.add_argument("--steps", type=int, default=0,
                    help="train exactly this many steps (the shipped run: 1113) instead of fitting the time")
    ap.add_argument("--fake-tokenizer", action="store_true", help="byte stand-in (tests only)")
    ap.add_argument("--max-docs", type=int, default=0, help="use only the first N documents (tests)")
    args = ap.parse_args()
    p = PRESETS[args.preset]
    random.seed(SEED)
    torch.manual_seed(SEED)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    os.makedirs(args.out, exist_ok=True)
    lf = open(os.path.join(args.out, "train_log.txt"), "w")
    t_start = time.time()
    log(f"torch {torch.__version__} device {device} preset {args.preset}", lf)

    train_rows = load_rows(os.path.join(args.data, "train.jsonl.xz"))
    held_rows = load_rows(os.path.join(args.data, "heldout.jsonl.xz"))
    if args.max_docs:
        train_rows, held_rows = train_rows[:args.max_docs], held_rows[:args.max_docs]
    tok_dir = os.path.join(args.out, "tokenizer")
    if args.fake_tokenizer:
        tk = T.ByteTokenizer()
        os.makedirs(tok_dir, exist_ok=True)
    else:
        tk = T.train_hf((r["text"] for r in train_rows), p["vocab"], tok_dir)
    T.write_configs(tok_dir, tk, p["target"]["max_position_embeddings"])
    train = tokenize(tk, train_rows)
    held = tokenize(tk, held_rows)
    n_chars = sum(len(r["text"]) for r in train_rows)
    stream = torch.cat([train[k] for k in sorted(train)])
    log(f"tokenizer vocab {tk.vocab_size}; train tokens {len(stream):,} ({n_chars / len(stream):.2f} chars/token) "
        f"{ {k: len(v) for k, v in train.items()} }; held-out { {k: len(v) for k, v in held.items()} }", lf)

    fam = Family(p, tk.vocab_size).to(device)
    sizes = {k: M.n_params(getattr(fam, k)) for k in ("target", "mtp", "dflash", "draft")}
    log(f"parameters {sizes}", lf)
    seq, batch = p["seq"], p["batch"]
    steps = args.steps or max(1, int(p["epochs"] * len(stream) / (seq * batch)))
    opt = torch.optim.AdamW(param_groups(fam), lr=p["lr"], betas=(0.9, 0.95), eps=1e-8)
    warmup = min(100, steps // 10 + 1)
    gen = torch.Generator().manual_seed(SEED)
    history, best = [], (float("inf"), None, 0)
    t_train = time.time()
    step = 0
    while step < steps:
        frac = step / steps
        lr = p["lr"] * (step + 1) / warmup if step < warmup else p["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(stream) - seq - 1, (batch,), generator=gen)
        x = torch.stack([stream[s:s + seq + 1] for s in starts]).long().to(device)
        with autocast(device):
            L = fam.losses(x, p["anchors"])
        opt.zero_grad(set_to_none=True)
        L["total"].backward()
        torch.nn.utils.clip_grad_norm_(fam.parameters(), 1.0)
        opt.step()
        step += 1
        elapsed = time.time() - t_train
        if step == 10:
            t10 = elapsed
        if step == 40 and not args.steps:
            # Shrink the schedule to the time there is, once the step time is known (steps 10-40:
            # the first steps carry CUDA's start-up).
            fit = int((args.train_seconds - t10) / ((elapsed - t10) / 30))
            if fit < steps:
                log(f"time budget: {steps} steps planned, {fit} fit in {args.train_seconds:.0f} s", lf)
                steps = fit
        if step % 10 == 0 or step == steps:
            rec = {"step": step, "tokens": step * seq * batch, "lr": lr, "s": round(elapsed, 1)}
            rec.update({k: round(float(v.detach()), 4) for k, v in L.items() if k != "total"})
            history.append(rec)
        if step % p["eval_every"] == 0 or step == steps:
            hl = heldout_loss(fam, held, seq, device)
            history[-1]["heldout"] = hl
            tgt = sum(v for k, v in hl.items() if not k.startswith("draft/")) / max(1, sum(1 for k in hl if not k.startswith("draft/")))
            log(f"step {step}/{steps} {elapsed:.0f}s lr {lr:.2e} " +
                " ".join(f"{k} {float(v):.3f}" for k, v in L.items() if k != "total") +
                " | held-out " + " ".join(f"{k} {v:.3f}" for k, v in hl.items()), lf)
            if tgt < best[0]:
                best = (tgt, copy.deepcopy({k: v.detach().cpu() for k, v in fam.state_dict().items()}), step)
        if elapsed > args.train_seconds * 1.15:
            log(f"stopping at step {step}: over the time budget", lf)
            break
    log(f"training done: {step} steps, {time.time() - t_train:.0f} s; best held-out mean CE {best[0]:.3f} at step {best[2]}", lf)
    if best[1] is not None:
        fam.load_state_dict(best[1])
    meta = {"preset": args.preset, "seed": SEED, "steps": step, "best_step": best[2], "params": sizes,
            "train_tokens": len(stream), "vocab": tk.vocab_size, "seq": seq, "batch": batch,
            "train_s": round(time.time() - t_train, 1), "history": history,
            "target_config": M.config_dict(fam.tc), "draft_config": M.config_dict(fam.dc),
            "dflash_config": M.config_dict(fam.fc), "torch": torch.__version__,
            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu"}

    import export
    import evaluate
    export.export_all(fam, tk, tok_dir, os.path.join(args.out, "export"))
    log("exported", lf)
    fam.float().eval()
    meta["eval"] = evaluate.evaluate_all(fam, tk, held, device, args.eval_seconds, lambda m: log(m, lf))
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(meta, f, indent=1)
    try:
        import plot
        plot.plot(meta, os.path.join(args.out, "loss.png"))
    except Exception as e:  # plotting is optional: the numbers are in results.json
        log(f"plot failed: {e}", lf)
    log(f"all done in {time.time() - t_start:.0f} s", lf)


if __name__ == "__main__":
    main()
