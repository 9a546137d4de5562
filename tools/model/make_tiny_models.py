#!/usr/bin/env python3
# Makes the tiny random-init Hugging Face checkpoints (Llama, Qwen2, Qwen3) and their golden fp32
# logits + greedy tokens that tests/model/convert_hf_test.cpp compares 1bit against; optionally
# goldens for a trained checkpoint (tinystories-656K). Run on the GPU machine (torch+transformers);
# everything runs on the CPU in fp32 so the goldens do not depend on TF32 or kernel choice.
#
#   python3 tools/model/make_tiny_models.py --out OUT [--tinystories DIR]
#
# Writes OUT/tiny_models.tar.gz holding tiny-llama/, tiny-qwen2/, tiny-qwen3/ (config.json,
# model.safetensors, tokenizer.json, golden.json) and, with --tinystories, tinystories-656K.json.
import argparse
import io
import json
import os
import sys
import tarfile

import torch
import transformers

SCRIPT_VERSION = 2  # 2: rope-scaling variants (linear, llama3, yarn); v1 models unchanged
SEED = 1234
# Fixed token-id prompts (all ids < every tiny vocabulary).
PROMPTS = [[5], [1, 17, 42, 99, 250], [3, 77, 8, 8, 120, 64, 31, 200, 11, 150, 2, 90]]
N_GREEDY = 64

TRAIN_TEXT = (
    "Once upon a time there was a little robot who lived in a quiet town by the sea. "
    "Every morning the robot walked to the harbor, counted the boats and sang a short song. "
    "The children liked the song, and the fishermen waved when they heard it. "
    "One day a storm came and the boats did not come back, so the robot climbed the old tower "
    "and turned on the big lamp. The light was bright, the boats found the harbor, and the town "
    "was happy again. 1, 2, 3: numbers, letters, and symbols like {}, [], <> and => help too."
)


def make_tokenizer():
    """A small byte-level BPE (GPT-2 style) trained on a fixed text: deterministic."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([TRAIN_TEXT] * 4, trainer)
    return tok


def randomize(model, seed):
    """Re-initializes every parameter with O(1) activations so greedy picks have clear margins."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                scale = (2.0 if "lm_head" in name else 1.0) / (p.shape[1] ** 0.5)
                p.copy_(scale * torch.randn(p.shape, generator=g))


def rounded(t):
    """A float32 tensor as nested lists of 9-significant-digit floats (exact for float32)."""
    return [[float(f"{x:.9g}") for x in row] for row in t.float().tolist()]


def goldens(model, prompts, n_greedy):
    """Logits for every prompt position, per-layer hidden states of the last prompt, greedy ids."""
    out = {"script_version": SCRIPT_VERSION, "transformers": transformers.__version__,
           "torch": torch.__version__, "prompts": []}
    with torch.no_grad():
        for ids in prompts:
            r = model(torch.tensor([ids]), output_hidden_states=True)
            out["prompts"].append({
                "ids": ids,
                "logits": rounded(r.logits[0]),  # [n_tokens, vocab]
                # [n_layers + 1, n_tokens, hidden]: embeddings, each layer's output; HF applies
                # the final norm to the last entry.
                "hidden_states": [rounded(h[0]) for h in r.hidden_states],
            })
        ids = list(prompts[-1])
        greedy, min_gap = [], float("inf")
        for _ in range(n_greedy):
            logits = model(torch.tensor([ids])).logits[0, -1]
            top2 = torch.topk(logits, 2).values
            min_gap = min(min_gap, float(top2[0] - top2[1]))
            nxt = int(torch.argmax(logits))
            greedy.append(nxt)
            ids.append(nxt)
        out["greedy_prompt"] = list(prompts[-1])
        out["greedy"] = greedy
        out["greedy_min_top2_gap"] = min_gap
    return out


def tiny_configs(vocab):
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  bos_token_id=0, eos_token_id=0)
    cfgs = {}
    cfgs["tiny-llama"] = ("LlamaForCausalLM", transformers.LlamaConfig(
        **common, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False))
    cfgs["tiny-qwen2"] = ("Qwen2ForCausalLM", transformers.Qwen2Config(
        **common, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True))
    if hasattr(transformers, "Qwen3Config"):
        # head_dim 32 != hidden/heads (16): exercises qwen3.attention.key_length.
        cfgs["tiny-qwen3"] = ("Qwen3ForCausalLM", transformers.Qwen3Config(
            **common, head_dim=32, rms_norm_eps=1e-6, rope_theta=1000000.0,
            tie_word_embeddings=True, attention_bias=False))
    return cfgs


def rope_kwargs(theta, scaling):
    """rope settings for transformers 4 (rope_theta + rope_scaling) or 5 (rope_parameters)."""
    if int(transformers.__version__.split(".")[0]) >= 5:
        return {"rope_parameters": {"rope_theta": theta, **scaling}}
    return {"rope_theta": theta, "rope_scaling": scaling}


def rope_variant_configs(vocab):
    """One-layer tied models whose RoPE is scaled; greedy runs reach position 76."""
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                  num_attention_heads=4, num_key_value_heads=2, bos_token_id=0, eos_token_id=0,
                  tie_word_embeddings=True)
    return {
        "tiny-llama-rope-linear": ("LlamaForCausalLM", "linear", transformers.LlamaConfig(
            **common, max_position_embeddings=256, rms_norm_eps=1e-5,
            **rope_kwargs(10000.0, {"rope_type": "linear", "factor": 2.0}))),
        "tiny-llama-rope-llama3": ("LlamaForCausalLM", "llama3", transformers.LlamaConfig(
            **common, max_position_embeddings=512, rms_norm_eps=1e-5,
            **rope_kwargs(10000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 64}))),
        # HF takes YaRN's factor as max_position_embeddings / original (128 / 32 = 4).
        "tiny-qwen2-yarn": ("Qwen2ForCausalLM", "yarn", transformers.Qwen2Config(
            **common, max_position_embeddings=128, rms_norm_eps=1e-6,
            **rope_kwargs(10000.0, {"rope_type": "yarn", "factor": 4.0,
                                    "original_max_position_embeddings": 32}))),
    }


def add_dir(tar, src_dir, arc_dir):
    for f in sorted(os.listdir(src_dir)):
        tar.add(os.path.join(src_dir, f), arcname=f"{arc_dir}/{f}")


def add_json(tar, arcname, obj):
    data = json.dumps(obj).encode()
    info = tarfile.TarInfo(arcname)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tinystories", default="")
    args = ap.parse_args()
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    work = os.path.join(args.out, "work")
    os.makedirs(work, exist_ok=True)
    tar = tarfile.open(os.path.join(args.out, "tiny_models.tar.gz"), "w:gz")

    tok = make_tokenizer()
    vocab = tok.get_vocab_size()
    print("tokenizer vocab", vocab)
    for i, (name, (cls_name, cfg)) in enumerate(tiny_configs(vocab).items()):
        cfg._attn_implementation = "eager"
        model = getattr(transformers, cls_name)(cfg).float().eval()
        randomize(model, SEED + i)
        d = os.path.join(work, name)
        model.save_pretrained(d, safe_serialization=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        g = goldens(model, PROMPTS, N_GREEDY)
        g["model"] = cls_name
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(g, f)
        print(name, "greedy", g["greedy"][:16], "min top2 gap", g["greedy_min_top2_gap"])
        add_dir(tar, d, name)

    for j, (name, (cls_name, rope_type, cfg)) in enumerate(rope_variant_configs(vocab).items()):
        try:
            cfg._attn_implementation = "eager"
            model = getattr(transformers, cls_name)(cfg).float().eval()
            got = getattr(model.model.rotary_emb, "rope_type", "?")
            if got != rope_type:
                raise RuntimeError(f"rotary_emb.rope_type is {got}, wanted {rope_type}")
            print(name, "attention_scaling", model.model.rotary_emb.attention_scaling)
            randomize(model, SEED + 10 + j)
            d = os.path.join(work, name)
            model.save_pretrained(d, safe_serialization=True)
            g = goldens(model, PROMPTS, N_GREEDY)
            g["model"] = cls_name
            with open(os.path.join(d, "golden.json"), "w") as f:
                json.dump(g, f)
            print(name, "greedy", g["greedy"][:16], "min top2 gap", g["greedy_min_top2_gap"])
            add_dir(tar, d, name)
        except Exception as e:  # keep the other goldens when one variant fails
            print(name, "FAILED:", repr(e), file=sys.stderr)

    if args.tinystories:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            args.tinystories, torch_dtype=torch.float32, attn_implementation="eager").eval()
        prompts = [[1], [1, 17, 42, 99, 250, 1000, 2000, 5, 6, 7]]
        try:
            hf_tok = transformers.AutoTokenizer.from_pretrained(args.tinystories)
            prompts.append(hf_tok("Once upon a time")["input_ids"])
        except Exception as e:  # the logits goldens do not need the tokenizer
            print("tokenizer failed:", e, file=sys.stderr)
        # The greedy continuation starts from the last prompt ("Once upon a time" when the
        # tokenizer loads).
        g = goldens(model, prompts, N_GREEDY)
        g["model"] = "tinystories-656K"
        print("tinystories prompts", [p["ids"] for p in g["prompts"]], "greedy", g["greedy"][:16])
        add_json(tar, "tinystories-656K.json", g)
    tar.close()


if __name__ == "__main__":
    main()
