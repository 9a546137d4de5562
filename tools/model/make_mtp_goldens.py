#!/usr/bin/env python3
"""Golden MTP drafts of the tiny hybrid checkpoints (tests/golden/model/tiny-qwen3next, tiny-qwen3_5,
tiny-qwen3_5moe, whose mtp.* weights tools/model/add_mtp_layer.py made), for
tests/engine/head_drafters_test.cpp. Run on the GPU machine (torch + transformers 5.x), fp32 on the
CPU:

  python3 tools/model/make_mtp_goldens.py DIR...      # writes DIR/mtp.json

The MTP layer runs as vLLM's qwen3_next_mtp.py runs the released checkpoints (transformers has no
MTP forward): entry p = fc([pre_fc_norm_embedding(embed(t[p+1])); pre_fc_norm_hidden(h_p)]) at
RoPE position p, h_p the target's final-normed hidden state; one full-attention decoder layer of the
family (transformers' own class, its weights loaded by transformers from mtp.layers.0.* renamed as
the model's first full-attention layer), causal over the entries; logits = lm_head(norm(out)). A
draft at anchor a (tokens 0..a known, h up to a - 1) chains: draft 1 from entry a - 1; entry a =
(draft 1, norm(out of entry a - 1)) gives draft 2; and so on.

mtp.json: {"prompts": [{"tokens": [...], "mtp": [[a, d1, d2, d3], ...]}], "min_top2_gap": g}.
"""
import json
import os
import shutil
import sys
import tempfile

import torch
import transformers
from safetensors.torch import load_file, save_file

DRAFT = 3


def load(d):
    m = transformers.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
    return m.eval()


def mtp_layer(d, full):
    """transformers' decoder layer `full` of a copy of the checkpoint whose layer `full` holds mtp.layers.0.*."""
    tensors = load_file(os.path.join(d, "model.safetensors"))
    mtp = {k: v for k, v in tensors.items() if k.startswith("mtp.")}
    swapped = {k: v for k, v in tensors.items() if not k.startswith("mtp.") and not k.startswith(f"model.layers.{full}.")}
    for k, v in mtp.items():
        if k.startswith("mtp.layers.0."):
            swapped[f"model.layers.{full}." + k[len("mtp.layers.0."):]] = v
    tmp = tempfile.mkdtemp()
    try:
        for f in ("config.json", "generation_config.json"):
            if os.path.exists(os.path.join(d, f)):
                shutil.copy(os.path.join(d, f), tmp)
        save_file({k: v.contiguous() for k, v in swapped.items()}, os.path.join(tmp, "model.safetensors"))
        other = load(tmp)
    finally:
        shutil.rmtree(tmp)
    return other.model.layers[full], mtp


def causal_mask(n):
    m = torch.full((n, n), float("-inf")).triu(1)
    return m.view(1, 1, n, n)


def main():
    torch.manual_seed(0)
    for d in sys.argv[1:]:
        cfg = json.load(open(os.path.join(d, "config.json")))
        full = cfg["layer_types"].index("full_attention")
        target = load(d)
        layer, w = mtp_layer(d, full)
        norm_cls = type(target.model.norm)
        hidden, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        norms = {}
        for k in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
            norms[k] = norm_cls(hidden, eps=eps)
            norms[k].weight.data.copy_(w[f"mtp.{k}.weight"])
        fc = w["mtp.fc.weight"]
        embed, lm_head = target.model.embed_tokens, target.lm_head
        golden = json.load(open(os.path.join(d, "golden.json")))
        prompts = [p["ids"] for p in golden["prompts"]] + [golden["greedy_prompt"]]
        out = {"prompts": [], "transformers": transformers.__version__, "torch": torch.__version__}
        min_gap = float("inf")

        # RoPE as the model computes it for its own layer (Qwen3.5's sections included): the
        # position embeddings its forward hands the first full-attention layer
        seen = {}

        def grab(mod, args, kwargs):
            seen["pe"] = kwargs["position_embeddings"] if "position_embeddings" in kwargs else args[1]

        def run_layer(x, pe):  # x [m, hidden] -> [m, hidden], causal, RoPE positions 0..m-1
            m = x.shape[0]
            cos, sin = pe
            y = layer(x.unsqueeze(0), position_embeddings=(cos[..., :m, :], sin[..., :m, :]),
                      attention_mask=causal_mask(m), position_ids=torch.arange(m)[None])
            return (y[0] if isinstance(y, tuple) else y)[0]

        with torch.no_grad():
            for ids in prompts:
                gen = target.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)[0].tolist()
                t = gen
                hook = target.model.layers[full].register_forward_pre_hook(grab, with_kwargs=True)
                target.model(torch.tensor([t + [0, 0, 0]]))  # positions up to n + 2
                hook.remove()
                pe = seen["pe"]
                h = target.model(torch.tensor([t])).last_hidden_state[0]  # final-normed
                n = len(t)
                entry = lambda tok, hid: torch.cat([norms["pre_fc_norm_embedding"](embed(torch.tensor([tok]))[0]),
                                                    norms["pre_fc_norm_hidden"](hid)]) @ fc.T
                rows = []
                for a in range(1, n):
                    xs = [entry(t[p + 1], h[p]) for p in range(a)]
                    drafts = []
                    for k in range(DRAFT):
                        y = run_layer(torch.stack(xs), pe)
                        o = norms["norm"](y[-1])
                        logits = lm_head(o)
                        top = torch.topk(logits, 2).values
                        min_gap = min(min_gap, float(top[0] - top[1]))
                        tok = int(torch.argmax(logits))
                        drafts.append(tok)
                        xs.append(entry(tok, o))
                    rows.append([a] + drafts)
                out["prompts"].append({"tokens": t, "mtp": rows})
        out["min_top2_gap"] = min_gap
        json.dump(out, open(os.path.join(d, "mtp.json"), "w"))
        print(d, "anchors", sum(len(p["mtp"]) for p in out["prompts"]), "min top-2 gap", min_gap)


if __name__ == "__main__":
    main()
