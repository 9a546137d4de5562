#!/usr/bin/env python3
# Makes tiny random-init Hugging Face checkpoints of the mixture-of-experts and hybrid families
# (Qwen3MoE, Qwen2MoE, Qwen3-Next, Qwen3.5 dense and MoE) with non-trivial norm weights, and their
# golden fp32 logits + greedy tokens, for tests/model/convert_hf_test.cpp. Same goldens as
# make_tiny_models.py (whose tokenizer, prompts and golden format it reuses). Run on the GPU
# machine (torch + transformers 5.x); everything runs on the CPU in fp32.
#
#   python3 tools/model/make_family_goldens.py --out OUT [--only NAME,...]
#
# Writes OUT/family_models.tar.gz (one folder per model: config.json, model.safetensors,
# tokenizer.json, golden.json, keys.txt listing the checkpoint's tensor names and shapes) and
# OUT/family_log.txt. A family whose class is missing or fails is logged and skipped.
import argparse
import json
import os
import sys
import tarfile
import traceback

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tiny_models as tiny  # noqa: E402  (tokenizer, prompts, goldens, tar helpers)

SCRIPT_VERSION = 1
SEED = 4321


def randomize(model, seed):
    """Every parameter re-drawn so activations are O(1) and greedy picks and expert choices have
    clear margins: norms 1 + 0.2 N(0,1) (a 2 +- 0.2 scale where a norm is zero-centred), biases
    0.1 N, embeddings N, matrices N / sqrt(fan_in) (fan_in = last dim), the router 3x that."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if "norm" in name and p.dim() == 1:
                p.copy_(1.0 + 0.2 * r)
            elif name.endswith(".bias") or name.endswith("dt_bias"):
                p.copy_(0.1 * r)
            elif name.endswith("A_log"):
                p.copy_(torch.log(torch.rand(p.shape, generator=g) * 4 + 1))
            elif "embed_tokens" in name:
                p.copy_(r)
            elif p.dim() == 1:
                p.copy_(0.5 * r)
            else:
                fan_in = p.shape[-1]
                scale = 1.0 / fan_in ** 0.5
                if "lm_head" in name:
                    scale *= 2.0
                if name.endswith("mlp.gate.weight") or "router" in name:
                    scale *= 3.0
                p.copy_(scale * r)


def family_configs(vocab):
    common = dict(vocab_size=vocab, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=256, bos_token_id=0, eos_token_id=0, rms_norm_eps=1e-6)
    moe = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)
    out = {}
    out["tiny-qwen3moe"] = ("Qwen3MoeForCausalLM", "Qwen3MoeConfig", dict(
        common, **moe, intermediate_size=128, num_hidden_layers=2, head_dim=32,
        norm_topk_prob=True, tie_word_embeddings=False, **tiny.rope_kwargs(1000000.0, {"rope_type": "default"})))
    # Layer 1 dense (mlp_only_layers): the family's mixed layers; a shared expert with its gate.
    out["tiny-qwen2moe"] = ("Qwen2MoeForCausalLM", "Qwen2MoeConfig", dict(
        common, **moe, intermediate_size=96, num_hidden_layers=3, shared_expert_intermediate_size=48,
        norm_topk_prob=False, mlp_only_layers=[1], tie_word_embeddings=True,
        **tiny.rope_kwargs(1000000.0, {"rope_type": "default"})))
    hybrid = dict(
        common, num_hidden_layers=4, head_dim=32, intermediate_size=96,
        layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, partial_rotary_factor=0.25,
        tie_word_embeddings=False)
    out["tiny-qwen3next"] = ("Qwen3NextForCausalLM", "Qwen3NextConfig", dict(
        hybrid, **moe, shared_expert_intermediate_size=48, norm_topk_prob=True,
        **tiny.rope_kwargs(10000.0, {"rope_type": "default", "partial_rotary_factor": 0.25})))
    out["tiny-qwen3_5"] = ("Qwen3_5ForCausalLM", "Qwen3_5TextConfig", dict(
        hybrid, **tiny.rope_kwargs(10000.0, {"rope_type": "default", "partial_rotary_factor": 0.25})))
    out["tiny-qwen3_5moe"] = ("Qwen3_5MoeForCausalLM", "Qwen3_5MoeTextConfig", dict(
        hybrid, **moe, shared_expert_intermediate_size=48,
        **tiny.rope_kwargs(10000.0, {"rope_type": "default", "partial_rotary_factor": 0.25})))
    return out


def make_config(cfg_name, kwargs, log):
    cls = getattr(transformers, cfg_name, None)
    if cls is None:
        raise RuntimeError(f"transformers has no {cfg_name}; Qwen names: "
                           + ", ".join(n for n in dir(transformers) if n.startswith("Qwen")))
    try:
        return cls(**kwargs)
    except TypeError as e:  # an unknown keyword: drop what the class does not take
        log.write(f"{cfg_name}(**kwargs) failed: {e}; retrying without unknown keys\n")
        import inspect
        params = inspect.signature(cls.__init__).parameters
        return cls(**{k: v for k, v in kwargs.items() if k in params})


def keys_listing(path):
    from safetensors import safe_open
    lines = []
    with safe_open(path, "pt") as f:
        for k in sorted(f.keys()):
            lines.append(f"{k} {list(f.get_slice(k).get_shape())} {f.get_slice(k).get_dtype()}")
    return "\n".join(lines) + "\n"


class RoutingGaps:
    """While active, records the smallest gap between the k-th and (k+1)-th router logit over
    every token of every MoE layer (a gap near 0 makes the expert choice fragile in fp32; logits,
    not probabilities, since a saturated softmax leaves tiny but well-ordered probabilities)."""

    def __init__(self, model):
        self.model, self.hooks, self.gaps = model, [], []

    def hook(self, mod, inp):
        h = inp[0].float().reshape(-1, inp[0].shape[-1])
        p = h @ mod.gate.weight.float().T
        k = int(getattr(self.model.config, "num_experts_per_tok", 1))
        top = torch.topk(p, k + 1, dim=-1).values
        self.gaps.append(float((top[:, k - 1] - top[:, k]).min()))

    def __enter__(self):
        for name, mod in self.model.named_modules():
            gate = getattr(mod, "gate", None)
            if name.endswith(".mlp") and getattr(gate, "weight", None) is not None and gate.weight.dim() == 2:
                self.hooks.append(mod.register_forward_pre_hook(self.hook))
        return self

    def __exit__(self, *exc):
        for h in self.hooks:
            h.remove()

    def min(self):
        return min(self.gaps) if self.gaps else None


MIN_ROUTING_GAP = 1e-3  # retry with the next seed below this (at most 40 seeds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    work = os.path.join(args.out, "work")
    os.makedirs(work, exist_ok=True)
    log = open(os.path.join(args.out, "family_log.txt"), "w")
    log.write(f"transformers {transformers.__version__} torch {torch.__version__}\n")
    tar = tarfile.open(os.path.join(args.out, "family_models.tar.gz"), "w:gz")
    tok = tiny.make_tokenizer()
    vocab = tok.get_vocab_size()
    only = set(filter(None, args.only.split(",")))
    for i, (name, (cls_name, cfg_name, kwargs)) in enumerate(family_configs(vocab).items()):
        if only and name not in only:
            continue
        try:
            cfg = make_config(cfg_name, kwargs, log)
            cfg._attn_implementation = "eager"
            model = getattr(transformers, cls_name)(cfg).float().eval()
            for attempt in range(40):
                randomize(model, SEED + 100 * i + attempt)
                with RoutingGaps(model) as gaps:
                    g = tiny.goldens(model, tiny.PROMPTS, tiny.N_GREEDY)
                if gaps.min() is None or gaps.min() >= MIN_ROUTING_GAP:
                    break
            d = os.path.join(work, name)
            model.save_pretrained(d, safe_serialization=True)
            tok.save(os.path.join(d, "tokenizer.json"))
            with open(os.path.join(d, "keys.txt"), "w") as f:
                f.write(keys_listing(os.path.join(d, "model.safetensors")))
            g["model"] = cls_name
            g["family_script_version"] = SCRIPT_VERSION
            g["seed"] = SEED + 100 * i + attempt
            g["routing_min_gap"] = gaps.min()
            with open(os.path.join(d, "golden.json"), "w") as f:
                json.dump(g, f)
            log.write(f"{name}: ok greedy {g['greedy'][:12]} top2 gap {g['greedy_min_top2_gap']:.4f} "
                      f"routing gap {g['routing_min_gap']}\n")
            tiny.add_dir(tar, d, name)
        except Exception:
            log.write(f"{name} FAILED:\n{traceback.format_exc()}\n")
        log.flush()
    # The modeling sources of the hybrid families, to read (not to copy).
    srcdir = os.path.dirname(transformers.__file__)
    for sub in ["qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_moe", "qwen2_moe"]:
        p = os.path.join(srcdir, "models", sub)
        if os.path.isdir(p):
            for f in sorted(os.listdir(p)):
                if f.startswith(("modeling_", "configuration_")) and f.endswith(".py"):
                    tar.add(os.path.join(p, f), arcname=f"hf_source/{sub}/{f}")
    tar.close()
    log.close()
    print(open(os.path.join(args.out, "family_log.txt")).read())


if __name__ == "__main__":
    main()
