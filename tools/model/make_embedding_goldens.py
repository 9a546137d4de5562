#!/usr/bin/env python3
# Golden embeddings of the tiny random-init Qwen3 (tests/golden/model/tiny-qwen3, made by
# make_tiny_models.py) that tests/e2e/embeddings_e2e_test.cpp compares `1bit serve --embedding`
# against: for fixed token-id prompts, Hugging Face transformers' final-normed hidden states
# (`model.model(input_ids).last_hidden_state`, Qwen3Model applies the final RMSNorm) pooled three
# ways (last token, mean over every token, first token) and L2-normalised. Runs on the CPU in
# fp32 (pooling and normalising in fp64); run it where torch and transformers are installed:
#
#   python3 tools/model/make_embedding_goldens.py --out OUT [--model DIR] [--dry-run]
#
# Writes OUT/embeddings.json; copy it to tests/golden/model/tiny-qwen3/embeddings.json.
# --dry-run prints the prompts and exits without importing torch.
import argparse
import json
import os
import sys

SCRIPT_VERSION = 1
# Prompt lengths: a single token, less than a K/V block (16), exactly one, one past it, several
# blocks, and long prompts that the e2e test's --batch-tokens 32 splits over many steps (the
# model's max_position_embeddings is 256).
LENGTHS = [1, 5, 16, 17, 40, 100, 200]
VOCAB = 384  # tiny-qwen3's vocabulary


def prompts():
    """Fixed token ids from a 32-bit LCG (no RNG library: the same ids on every machine)."""
    state = 12345
    out = []
    for n in LENGTHS:
        ids = []
        for _ in range(n):
            state = (1103515245 * state + 12345) % (1 << 31)
            ids.append((state >> 8) % VOCAB)
        out.append(ids)
    return out


def rounded(v):
    """A vector as 9-significant-digit floats (exact for float32, close for float64)."""
    return [float(f"{x:.9g}") for x in v]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, help="folder to write embeddings.json to")
    ap.add_argument("--model", default=os.path.join(here, "..", "..", "tests", "golden", "model", "tiny-qwen3"),
                    help="the tiny Qwen3 checkpoint (default: tests/golden/model/tiny-qwen3)")
    ap.add_argument("--dry-run", action="store_true", help="print the prompts and exit (no torch needed)")
    args = ap.parse_args()
    ps = prompts()
    if args.dry_run:
        for p in ps:
            print(len(p), p[:8], "...")
        print("would read", os.path.abspath(args.model), "and write", os.path.join(args.out, "embeddings.json"))
        return 0
    for f in ("config.json", "model.safetensors"):
        if not os.path.isfile(os.path.join(args.model, f)):
            print(f"no {f} in {args.model}", file=sys.stderr)
            return 1

    import torch
    import transformers

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            args.model, dtype=torch.float32, attn_implementation="eager")
    except TypeError:  # transformers 4 spells it torch_dtype
        model = transformers.AutoModelForCausalLM.from_pretrained(
            args.model, torch_dtype=torch.float32, attn_implementation="eager")
    model = model.float().eval().to("cpu")

    out = {"script_version": SCRIPT_VERSION, "transformers": transformers.__version__, "torch": torch.__version__,
           "model": os.path.basename(os.path.normpath(args.model)),
           "hidden_size": model.config.hidden_size, "prompts": []}
    with torch.no_grad():
        for ids in ps:
            h = model.model(torch.tensor([ids])).last_hidden_state[0].double()  # [n_tokens, hidden]
            pooled = {"last": h[-1], "mean": h.mean(dim=0), "cls": h[0]}
            entry = {"ids": ids}
            for name, v in pooled.items():
                entry[name] = rounded((v / v.norm()).tolist())
            out["prompts"].append(entry)
            print(f"prompt of {len(ids)} tokens: |last| {float(h[-1].norm()):.4f}")

        # Sanity: the same rows as make_tiny_models.py's golden.json (its last hidden_states entry is
        # the final-normed output), so this checkpoint loads as it was made.
        golden_path = os.path.join(args.model, "golden.json")
        if os.path.isfile(golden_path):
            with open(golden_path) as f:
                golden = json.load(f)
            worst = 0.0
            for p in golden["prompts"]:
                if "hidden_states" not in p:
                    continue
                h = model.model(torch.tensor([p["ids"]])).last_hidden_state[0]
                ref = torch.tensor(p["hidden_states"][-1])
                worst = max(worst, float((h - ref).abs().max()))
            out["check_vs_golden_json_max_abs"] = worst
            print("max abs diff of final-normed rows vs golden.json:", worst)

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "embeddings.json")
    with open(path, "w") as f:
        json.dump(out, f)
    print("wrote", path, "with", len(out["prompts"]), "prompts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
