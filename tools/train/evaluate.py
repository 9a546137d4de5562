"""Held-out evaluation of the family in PyTorch (fp32): perplexity per domain, and for each
drafter the mean number of tokens a greedy verification step yields (accepted drafts + the
target's own token; at most draft length + 1).

Greedy speculative decoding writes exactly the target's greedy text, so each prompt's target
greedy continuation s is made once; the target's hidden states of s are those every verify step
would have. A step at known position a (tokens s[0..a]) drafts s[a+1..a+k], keeps the matching
prefix (n tokens) and moves to a+n+1. The MTP head and the DFlash drafter are run for every a at
once (their masks see only what the step would see); the draft model runs step by step.
"""
import math
import time

import torch
import torch.nn.functional as F

PROMPT_TOKENS = 64
GEN_TOKENS = 128
N_SAMPLES = 16
MTP_DRAFT = 3
DRAFT_MODEL_DRAFT = 3


@torch.no_grad()
def perplexity(lm, stream, seq, device, max_chunks=64):
    n = min(max_chunks, (len(stream) - 1) // seq)
    if n == 0:
        return None
    tot, cnt = 0.0, 0
    for i in range(n):
        x = stream[i * seq:(i + 1) * seq + 1].long().to(device)
        lg, _, _ = lm(x[None, :-1])
        tot += F.cross_entropy(lg[0].float(), x[1:], reduction="sum").item()
        cnt += seq
    return math.exp(tot / cnt)


@torch.no_grad()
def greedy(lm, prompt, n_new, stop_ids):
    """Target greedy continuation without a cache (full forward each token)."""
    x = prompt.clone()
    for _ in range(n_new):
        lg, _, _ = lm(x[None])
        nxt = lg[0, -1].argmax()
        x = torch.cat([x, nxt[None]])
        if nxt.item() in stop_ids:
            break
    return x


def walk(s_len, start, drafts_at):
    """Simulates verification steps over the greedy sequence; drafts_at(a) -> list of (draft,
    truth) pairs for s[a+1..]. Returns (tokens produced, steps)."""
    a, steps, produced = start, 0, 0
    while a < s_len - 1:
        n = 0
        for d, t in drafts_at(a):
            if d != t:
                break
            n += 1
        n = min(n, s_len - 1 - a - 1)
        a += n + 1
        produced += n + 1
        steps += 1
    return produced, steps


@torch.no_grad()
def acceptance(fam, s, start):
    """Mean tokens per step for the MTP head, the DFlash drafter and the draft model on one
    greedy sequence s (1-D), generation starting at index start (s[start] came from prefill)."""
    ids = s[None]
    _, h, feats = fam.target(ids, keep_layers=set(fam.fc.target_layers))
    ew = fam.target.model.embed_tokens.weight
    L = s.shape[0]
    sl = s.tolist()
    res = {}

    # MTP: chained pass k at position q drafts s[q+2] for the chain started at q-k.
    mtp = [lg[0].argmax(-1).tolist() for lg in fam.mtp(h, ids, ew, ew, MTP_DRAFT, greedy=True)]

    def mtp_at(a):
        return [(mtp[k][a - 1 + k], sl[a + 1 + k]) for k in range(MTP_DRAFT) if a + 1 + k < L]
    res["mtp"] = walk(L, start, mtp_at)

    # DFlash: one block per anchor a (all at once), position j drafts s[a+j].
    bs = fam.fc.block_size
    anchors = torch.arange(start, L - 1, device=s.device)
    blocks = fam.dflash(feats, ids, anchors, ew, ew)[0].argmax(-1).tolist()   # [A][bs]

    def dflash_at(a):
        row = blocks[a - start]
        return [(row[j], sl[a + j]) for j in range(1, bs) if a + j < L]
    res["dflash"] = walk(L, start, dflash_at)

    # Draft model: DRAFT_MODEL_DRAFT greedy tokens from s[0..a], one forward each.
    def draft_at(a):
        x = s[:a + 1]
        out = []
        for k in range(DRAFT_MODEL_DRAFT):
            if a + 1 + k >= L:
                break
            lg, _, _ = fam.draft(x[None])
            d = lg[0, -1].argmax()
            out.append((d.item(), sl[a + 1 + k]))
            x = torch.cat([x, d[None]])
        return out
    res["draft"] = walk(L, start, draft_at)
    return res


def prompts_for(dom, stream, tk, n, rng_seed=7):
    """Prompts from a held-out stream: windows of PROMPT_TOKENS tokens at evenly spread offsets
    (code, prose), or chat conversations cut after their last assistant header (chat)."""
    ids = stream.tolist()
    if dom == "chat":
        # One conversation per document; the prompt ends with its assistant header.
        header = tk.encode_batch(["<|im_start|>assistant\n"])[0]
        eot = tk.ids["<|endoftext|>"]
        out, doc = [], []
        for t in ids:
            if t != eot:
                doc.append(t)
                continue
            j = max((k for k in range(len(doc) - len(header) + 1) if doc[k:k + len(header)] == header), default=-1)
            if 0 < j and j + len(header) <= 256:
                out.append(doc[:j + len(header)])
            doc = []
            if len(out) == n:
                break
        return out
    span = len(ids) - PROMPT_TOKENS - GEN_TOKENS
    if span <= 0:
        return []
    return [ids[int(k * span / n):int(k * span / n) + PROMPT_TOKENS] for k in range(n)]


@torch.no_grad()
def evaluate_all(fam, tk, held, device, budget_s, log):
    t0 = time.time()
    seq = fam.tc.max_position_embeddings
    out = {"ppl": {}, "ppl_draft": {}, "accept": {}, "settings": {
        "prompt_tokens": PROMPT_TOKENS, "gen_tokens": GEN_TOKENS, "samples": N_SAMPLES,
        "mtp_draft": MTP_DRAFT, "draft_model_draft": DRAFT_MODEL_DRAFT, "dflash_block": fam.fc.block_size,
        "unit": "tokens per verification step (accepted drafts + 1)"}}
    for dom, st in held.items():
        out["ppl"][dom] = perplexity(fam.target, st, seq, device)
        out["ppl_draft"][dom] = perplexity(fam.draft, st, seq, device)
    log(f"perplexity target {out['ppl']} draft {out['ppl_draft']}")
    stop = {tk.ids["<|endoftext|>"], tk.ids["<|im_end|>"]}
    groups = {"code": held.get("code"), "prose": torch.cat([held[k] for k in ("prose", "story") if k in held]),
              "chat": held.get("chat")}
    for dom, st in groups.items():
        if st is None:
            continue
        tot = {"mtp": [0, 0], "dflash": [0, 0], "draft": [0, 0]}
        n_done = 0
        for p in prompts_for(dom, st, tk, N_SAMPLES):
            if time.time() - t0 > budget_s:
                log(f"evaluation budget reached in {dom} after {n_done} samples")
                break
            pr = torch.tensor(p, device=device)
            s = greedy(fam.target, pr, GEN_TOKENS, stop)
            if s.shape[0] - len(p) < 2:
                continue
            r = acceptance(fam, s, len(p))
            for k, (prod, steps) in r.items():
                tot[k][0] += prod
                tot[k][1] += steps
            n_done += 1
            if dom != "chat" and n_done == 1 or dom == "chat" and n_done <= 2:
                log(f"sample {dom}: {tk.decode(s.tolist())!r}")
        out["accept"][dom] = {k: round(v[0] / v[1], 3) if v[1] else None for k, v in tot.items()}
        out["accept"][dom]["samples"] = n_done
        log(f"acceptance {dom}: {out['accept'][dom]}")
    out["eval_s"] = round(time.time() - t0, 1)
    return out
