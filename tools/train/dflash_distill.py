#!/usr/bin/env python3
"""Trains the DFlash block drafter against the frozen, shipped target by self-distillation (issue 8):
the target (read back from models/onebit-20m-q8_0.gguf, Q8_0 dequantised to fp32: exactly the
weights the engine runs) writes greedy continuations of training prompts, and the drafter learns to
predict those (the labels are the target's own argmax, plus its distribution), with the
last-context input (DflashConfig.add_last_context) and position weights toward the block's start
(acceptance is a prefix). Starts from the shipped drafter. Evaluates before and after exactly as
tools/train/evaluate.py does (held-out prompts, target greedy text, mean tokens per verification
step = accepted drafts + 1, block 8) and exports config.json + model.safetensors for
src/model/convert_drafters.cpp.

  python3 tools/train/dflash_pack.py ... --out PACK         # here: data + shipped drafter
  python3 tools/train/dflash_distill.py --pack PACK --gguf models/onebit-20m-q8_0.gguf --out DIR
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import evaluate as EV  # noqa: E402
import export as E     # noqa: E402
import model as M      # noqa: E402

SEED = 2468
EOT, IM_START, IM_END = 8187, 8188, 8189
HEADER = [IM_START, 678, 198]      # "<|im_start|>assistant\n"


# ---------------------------------------------------------------- GGUF (Q8_0 / F16 / F32) reader
GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def read_gguf(path):
    """(metadata {key: value}, {name: float32 numpy array in torch order}) of a GGUF file whose
    tensors are F32, F16 or Q8_0."""
    buf = open(path, "rb").read()
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, buf, off)
        off += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal off
        n = take("Q")
        s = buf[off:off + n].decode("utf-8", "replace")
        off += n
        return s

    def value(t):
        if t in GGUF_SCALARS:
            return take(GGUF_SCALARS[t])
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        raise ValueError(f"gguf value type {t}")

    assert buf[:4] == b"GGUF", path
    off = 4
    take("I")
    n_t, n_kv = take("Q"), take("Q")
    meta = {}
    for _ in range(n_kv):
        k = string()
        meta[k] = value(take("I"))
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        infos.append((name, ne, take("I"), take("Q")))
    align = meta.get("general.alignment", 32)
    base = (off + align - 1) // align * align
    out = {}
    for name, ne, t, o in infos:
        n = int(np.prod(ne))
        p = base + o
        if t == 0:
            a = np.frombuffer(buf, np.float32, n, p)
        elif t == 1:
            a = np.frombuffer(buf, np.float16, n, p).astype(np.float32)
        elif t == 8:                                   # Q8_0: 32 values = fp16 scale + 32 int8
            blk = np.frombuffer(buf, np.uint8, n // 32 * 34, p).reshape(-1, 34)
            d = blk[:, :2].copy().view(np.float16).astype(np.float32)
            q = blk[:, 2:].copy().view(np.int8).astype(np.float32)
            a = (q * d).reshape(-1)
        else:
            raise ValueError(f"{name}: ggml type {t}")
        out[name] = a.reshape(list(reversed(ne))).copy()
    return meta, out


GGUF_TO_HF = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
              "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
              "attn_k_norm": "self_attn.k_norm", "attn_norm": "input_layernorm",
              "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
              "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def target_from_gguf(path):
    """The target as model.Qwen3LM (fp32, eval mode) from its GGUF (weights as the engine sees them)."""
    meta, ts = read_gguf(path)
    a = meta["general.architecture"]
    c = M.Qwen3Config(vocab_size=ts["token_embd.weight"].shape[0], hidden_size=meta[f"{a}.embedding_length"],
                      intermediate_size=meta[f"{a}.feed_forward_length"], num_hidden_layers=meta[f"{a}.block_count"],
                      num_attention_heads=meta[f"{a}.attention.head_count"],
                      num_key_value_heads=meta[f"{a}.attention.head_count_kv"],
                      head_dim=meta.get(f"{a}.attention.key_length", 64),
                      rms_norm_eps=meta[f"{a}.attention.layer_norm_rms_epsilon"],
                      rope_theta=meta.get(f"{a}.rope.freq_base", 10000.0),
                      max_position_embeddings=meta[f"{a}.context_length"])
    sd = {}
    for name, v in ts.items():
        if name == "token_embd.weight":
            k = "model.embed_tokens.weight"
        elif name == "output_norm.weight":
            k = "model.norm.weight"
        elif name == "output.weight":
            continue
        else:
            _, i, rest = name.split(".", 2)
            k = f"model.layers.{i}.{GGUF_TO_HF[rest[:-len('.weight')]]}.weight"
        sd[k] = torch.from_numpy(v)
    lm = M.Qwen3LM(c).eval()
    lm.load_state_dict(sd)
    return lm


# ---------------------------------------------------------------- target greedy with a KV cache
@torch.no_grad()
def greedy_batch(lm, prompts, n_new):
    """prompts [B, P] (same length) -> [B, P+n_new], the target's greedy continuation (KV cache)."""
    c = lm.c
    b, p = prompts.shape
    dev = prompts.device
    total = p + n_new
    cos_all, sin_all = M.rope_cos_sin(torch.arange(total, device=dev), c.head_dim, c.rope_theta, dev)
    caches = [None] * c.num_hidden_layers
    out = torch.empty(b, total, dtype=torch.long, device=dev)
    out[:, :p] = prompts
    x_ids, start = prompts, 0
    for step in range(n_new + 1):
        n = x_ids.shape[1]
        cos, sin = cos_all[start:start + n], sin_all[start:start + n]
        x = lm.model.embed_tokens(x_ids)
        for i, layer in enumerate(lm.model.layers):
            at = layer.self_attn
            hn = layer.input_layernorm(x)
            q = at.q_norm(at.q_proj(hn).view(b, n, -1, c.head_dim)).transpose(1, 2)
            q = M.apply_rope(q, cos, sin)
            k, v = at.kv(hn, cos, sin)
            if caches[i] is not None:
                k = torch.cat([caches[i][0], k], dim=2)
                v = torch.cat([caches[i][1], v], dim=2)
            caches[i] = (k, v)
            mask = None if start == 0 else torch.ones(n, k.shape[2], dtype=torch.bool, device=dev)
            o = M.attend(q, k, v, mask).transpose(1, 2).reshape(b, n, -1)
            x = x + at.o_proj(o)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        nxt = lm.lm_head(lm.model.norm(x[:, -1])).argmax(-1)
        if step == n_new:
            break
        out[:, p + step] = nxt
        x_ids, start = nxt[:, None], start + n
    return out


# ---------------------------------------------------------------- evaluation (as evaluate.py)
class StubTok:
    """What evaluate.prompts_for needs of the tokenizer (the chat header ids are fixed)."""
    ids = {"<|endoftext|>": EOT, "<|im_end|>": IM_END, "<|im_start|>": IM_START}

    def encode_batch(self, texts):
        assert texts == ["<|im_start|>assistant\n"]
        return [list(HEADER)]


def eval_sequences(target, held, device, log):
    """Per domain, the (greedy sequence, start) pairs of evaluate.evaluate_all's acceptance part."""
    tk = StubTok()
    stop = {EOT, IM_END}
    groups = {"code": held["code"], "prose": torch.cat([held[k] for k in ("prose", "story")]),
              "chat": held["chat"]}
    seqs = {}
    for dom, st in groups.items():
        seqs[dom] = []
        for p in EV.prompts_for(dom, st, tk, EV.N_SAMPLES):
            pr = torch.tensor(p, device=device)
            s = EV.greedy(target, pr, EV.GEN_TOKENS, stop)
            if s.shape[0] - len(p) < 2:
                continue
            seqs[dom].append((s, len(p)))
        log(f"eval sequences {dom}: {len(seqs[dom])}")
    return seqs


@torch.no_grad()
def acceptance(target, seqs, dflash=None, mtp=None):
    """{domain: {"dflash": tokens/step, "mtp": tokens/step}}: evaluate.acceptance's walks."""
    ew = target.model.embed_tokens.weight
    res = {}
    for dom, lst in seqs.items():
        tot = {"dflash": [0, 0], "mtp": [0, 0]}
        for s, start in lst:
            ids = s[None]
            keep = set(dflash.d.target_layers) if dflash is not None else set()
            _, h, feats = target(ids, keep_layers=keep)
            L, sl = s.shape[0], s.tolist()
            if dflash is not None:
                bs = dflash.d.block_size
                anchors = torch.arange(start, L - 1, device=s.device)
                blocks = dflash(feats, ids, anchors, ew, ew)[0].argmax(-1).tolist()

                def dflash_at(a):
                    row = blocks[a - start]
                    return [(row[j], sl[a + j]) for j in range(1, bs) if a + j < L]
                p, n = EV.walk(L, start, dflash_at)
                tot["dflash"][0] += p
                tot["dflash"][1] += n
            if mtp is not None:
                lg = [x[0].argmax(-1).tolist() for x in mtp(h, ids, ew, ew, EV.MTP_DRAFT, greedy=True)]

                def mtp_at(a):
                    return [(lg[k][a - 1 + k], sl[a + 1 + k]) for k in range(EV.MTP_DRAFT) if a + 1 + k < L]
                p, n = EV.walk(L, start, mtp_at)
                tot["mtp"][0] += p
                tot["mtp"][1] += n
        res[dom] = {k: round(v[0] / v[1], 3) for k, v in tot.items() if v[1]}
        res[dom]["samples"] = len(lst)
    return res


# ---------------------------------------------------------------- training data
def make_prompts(streams, n, plen, gen, shares):
    """n prompts of plen tokens: windows of the training streams in the given domain shares; chat
    windows end at an assistant header (as the held-out chat prompts do)."""
    out = []
    for dom, share in shares.items():
        st = streams[dom]
        k = int(round(n * share))
        if dom == "chat":
            hs = np.nonzero((st[:-2] == HEADER[0]) & (st[1:-1] == HEADER[1]) & (st[2:] == HEADER[2]))[0] + 3
            hs = hs[hs >= plen]
            ends = hs[np.asarray(torch.randint(0, len(hs), (k,)).tolist())]
        else:
            ends = np.asarray(torch.randint(plen, len(st) - gen, (k,)).tolist())
        for e in ends:
            out.append(st[e - plen:e])
    x = torch.from_numpy(np.stack(out).astype(np.int64))
    return x[torch.randperm(x.shape[0])]


def lr_at(t, total, peak, warm=0.05):
    f = t / total
    if f < warm:
        return peak * f / warm
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, (f - warm) / (1 - warm)))))


def save_drafter(df, cfg_base, out):
    os.makedirs(out, exist_ok=True)
    cfg = dict(cfg_base, add_last_context=df.d.add_last_context, block_size=df.d.block_size,
               num_hidden_layers=df.d.n_layers, target_layer_ids=list(df.d.target_layers))
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
    sd = {k: v.detach().float().cpu() for k, v in df.state_dict().items()}
    E.write_safetensors(os.path.join(out, "model.safetensors.tmp"), {"dflash." + k: v.half() for k, v in sd.items()},
                        {"format": "pt"})
    os.replace(os.path.join(out, "model.safetensors.tmp"), os.path.join(out, "model.safetensors"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pack", required=True, help="dflash_pack.py output")
    ap.add_argument("--gguf", required=True, help="the shipped target GGUF")
    ap.add_argument("--out", required=True)
    ap.add_argument("--train-seconds", type=float, default=240)
    ap.add_argument("--prompts", type=int, default=24576)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--gen", type=int, default=192)
    ap.add_argument("--gen-batch", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--anchors", type=int, default=96)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--decay", type=float, default=4.0, help="position weight exp(-(j-1)/decay)")
    ap.add_argument("--kd", type=float, default=0.5)
    ap.add_argument("--no-last-context", action="store_true")
    ap.add_argument("--code-share", type=float, default=0.45)
    ap.add_argument("--deadline", type=float, default=0, help="seconds since the start to be done by")
    ap.add_argument("--eval-only", action="store_true")
    ap.add_argument("--eval-gen", type=int, default=0, help="generated tokens per sample (0: evaluate.py's 128)")
    ap.add_argument("--max-eval", type=int, default=0, help="samples per domain (0: evaluate.py's 16)")
    args = ap.parse_args()
    torch.manual_seed(SEED)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)
    logf = open(os.path.join(args.out, "distill_log.txt"), "a")

    def log(msg):
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    t_start = time.time()
    target = target_from_gguf(args.gguf).to(dev)
    for p in target.parameters():
        p.requires_grad_(False)
    data = np.load(os.path.join(args.pack, "streams.npz"))
    train = {k[len("train_"):]: data[k].astype(np.int64) for k in data.files if k.startswith("train_")}
    held = {k[len("held_"):]: torch.from_numpy(data[k].astype(np.int64)) for k in data.files if k.startswith("held_")}
    base_dir = os.path.join(args.pack, "dflash")
    cfg_base = json.load(open(os.path.join(base_dir, "config.json")))
    d0 = M.DflashConfig(block_size=cfg_base["block_size"], n_layers=cfg_base["num_hidden_layers"],
                        target_layers=tuple(cfg_base["target_layer_ids"]),
                        add_last_context=cfg_base.get("add_last_context", False))
    sd0 = {k[len("dflash."):]: torch.from_numpy(v) for k, v in
           E.read_safetensors(os.path.join(base_dir, "model.safetensors")).items()}
    base = M.DflashDrafter(target.c, d0).eval()
    base.load_state_dict(sd0)
    base = base.to(dev)
    mtp = None
    if os.path.exists(os.path.join(args.pack, "mtp", "model.safetensors")):
        mtp = M.MtpHead(target.c).eval()
        sd = E.read_safetensors(os.path.join(args.pack, "mtp", "model.safetensors"))
        mtp.load_state_dict({k[len("mtp."):].replace("layers.0.", "block.", 1): torch.from_numpy(v) for k, v in sd.items()})
        mtp = mtp.to(dev)
    if args.max_eval:
        EV.N_SAMPLES = args.max_eval
    if args.eval_gen:
        EV.GEN_TOKENS = args.eval_gen
    log(f"loaded target (Q8_0 dequantised) and shipped drafter in {time.time() - t_start:.1f}s on {dev}")
    seqs = eval_sequences(target, held, dev, log)
    results = {"settings": {k: v for k, v in vars(args).items()}, "target": "Q8_0-dequantised " + args.gguf}
    results["baseline"] = acceptance(target, seqs, base, mtp)
    log(f"baseline (shipped drafter, MTP head): {results['baseline']}")
    json.dump(results, open(os.path.join(args.out, "distill_results.json"), "w"), indent=1)
    if args.eval_only:
        return

    # Self-distillation data: the target's greedy continuations of training prompts.
    t0 = time.time()
    rest = 1 - args.code_share
    shares = {"code": args.code_share, "story": rest * 0.3, "prose": rest * 0.35, "chat": rest * 0.35}
    shares = {k: v for k, v in shares.items() if k in train}
    prompts = make_prompts(train, args.prompts, args.prompt_len, args.gen, shares)
    seq_parts = []
    for i in range(0, prompts.shape[0], args.gen_batch):
        seq_parts.append(greedy_batch(target, prompts[i:i + args.gen_batch].to(dev), args.gen).cpu())
    seqs_train = torch.cat(seq_parts).to(dev)
    log(f"generated {seqs_train.shape[0]} x {seqs_train.shape[1]} target-greedy sequences in {time.time() - t0:.1f}s")
    # Check: the cached generator agrees with a full forward's argmax.
    with torch.no_grad():
        chk = seqs_train[:8]
        lg, _, _ = target(chk[:, :-1])
        agree = (lg[:, args.prompt_len - 1:].argmax(-1) == chk[:, args.prompt_len:]).float().mean().item()
    log(f"greedy check (full forward argmax = generated token): {agree:.4f}")
    results["greedy_check"] = agree

    dc = M.DflashConfig(block_size=d0.block_size, n_layers=d0.n_layers, target_layers=d0.target_layers,
                        add_last_context=not args.no_last_context)
    df = M.DflashDrafter(target.c, dc).to(dev)
    df.load_state_dict(base.state_dict())
    df.train()
    opt = torch.optim.AdamW(df.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    ew = target.model.embed_tokens.weight
    bs, L = dc.block_size, seqs_train.shape[1]
    w = torch.exp(-torch.arange(bs - 1, device=dev, dtype=torch.float32) / args.decay)
    w = w / w.sum()
    lo = max(1, args.prompt_len // 2)
    keep = set(dc.target_layers)
    t0, step, last_save = time.time(), 0, time.time()
    # Train for --train-seconds, or less where --deadline (seconds since the start) leaves too
    # little for the final evaluation and export (about 30 s on the GPU).
    span = args.train_seconds
    if args.deadline:
        span = max(10.0, min(span, args.deadline - 45 - (t0 - t_start)))
    log(f"training for {span:.0f}s")
    while time.time() - t0 < span:
        for g in opt.param_groups:
            g["lr"] = lr_at(time.time() - t0, span, args.lr)
        idx = torch.randint(0, seqs_train.shape[0], (args.batch,), device=dev)
        x = seqs_train[idx]
        with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            tl, _, feats = target(x, keep_layers=keep)
        anchors = (torch.randperm(L - bs + 1 - lo, device=dev)[:args.anchors] + lo).sort().values
        pos = anchors[:, None] + torch.arange(1, bs, device=dev)[None, :]
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            dl = df(feats, x, anchors, ew, ew)[:, :, 1:]
        lab = x[:, pos]
        tea = tl[:, pos - 1]
        loss, ces, accs = 0, [], []
        for j in range(bs - 1):
            lgj = dl[:, :, j].reshape(-1, dl.shape[-1]).float()
            ce = F.cross_entropy(lgj, lab[:, :, j].reshape(-1))
            kd = -(tea[:, :, j].reshape(-1, dl.shape[-1]).float().softmax(-1) * lgj.log_softmax(-1)).sum(-1).mean()
            loss = loss + w[j] * ((1 - args.kd) * ce + args.kd * kd)
            ces.append(ce.item() if step % 25 == 0 else 0)
            accs.append((lgj.argmax(-1) == lab[:, :, j].reshape(-1)).float().mean().item() if step % 25 == 0 else 0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(df.parameters(), 1.0)
        opt.step()
        if step % 25 == 0:
            log(f"step {step} {time.time() - t0:.0f}s lr {opt.param_groups[0]['lr']:.2e} ce " +
                " ".join(f"{c:.2f}" for c in ces) + " | top1 " + " ".join(f"{a:.2f}" for a in accs))
        if time.time() - last_save > 60:
            save_drafter(df, cfg_base, os.path.join(args.out, "dflash"))
            last_save = time.time()
        step += 1
    log(f"trained {step} steps in {time.time() - t0:.0f}s")
    df.eval()
    save_drafter(df, cfg_base, os.path.join(args.out, "dflash"))
    results["steps"] = step
    results["new"] = acceptance(target, seqs, df, None)
    log(f"new drafter: {results['new']}")
    # Round trip: the exported fp16 file gives the same numbers.
    back = M.DflashDrafter(target.c, dc).eval()
    back.load_state_dict({k[len("dflash."):]: torch.from_numpy(v) for k, v in
                          E.read_safetensors(os.path.join(args.out, "dflash", "model.safetensors")).items()})
    results["new_fp16_export"] = acceptance(target, seqs, back.to(dev), None)
    log(f"new drafter from its fp16 export: {results['new_fp16_export']}")
    results["total_s"] = round(time.time() - t_start, 1)
    json.dump(results, open(os.path.join(args.out, "distill_results.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
