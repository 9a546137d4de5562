#!/usr/bin/env python3
"""Checks an exported target against Hugging Face transformers: the checkpoint loads as
Qwen3ForCausalLM, its fp32 logits match tools/train/model.py on the same weights, the tokenizer
loads with AutoTokenizer, and the chat template renders. Needs transformers (the GPU machine).

  python3 tools/train/check_hf.py EXPORT/target
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export as E  # noqa: E402

TEXT = ("Once upon a time, there was a little dog named Max. Max liked to run in the park.\n"
        "int main(int argc, char** argv) {\n  return run(argc, argv);\n}\n")


def main():
    d = sys.argv[1]
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(d)
    hf = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
    ours = E.load_lm(d)
    ids = tok(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        a = hf(ids).logits[0]
        b = ours(ids)[0][0]
    diff = (a - b).abs().max().item()
    print(f"check_hf: {type(hf).__name__}, {ids.shape[1]} tokens, max|hf-ours| {diff:.3e}, "
          f"max|logit| {a.abs().max().item():.2f}, argmax agree {(a.argmax(-1) == b.argmax(-1)).float().mean().item():.3f}")
    msgs = [{"role": "user", "content": "Tell me a story."}]
    for think in (False, True):
        s = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=think)
        print(f"check_hf: template (enable_thinking={think}) {s!r}")
    s = tok.apply_chat_template(msgs + [{"role": "assistant", "content": "<think>\nhm\n</think>\n\nHi."}]
                                + msgs, tokenize=False, add_generation_prompt=True)
    print(f"check_hf: template (history) {s!r}")
    p = tok.apply_chat_template(msgs, add_generation_prompt=True, enable_thinking=False, return_tensors="pt")
    if not torch.is_tensor(p):
        p = p["input_ids"]
    out = hf.generate(p, max_new_tokens=80, do_sample=False)
    print(f"check_hf: HF greedy chat reply {tok.decode(out[0, p.shape[1]:])!r}")
    st = tok("Once upon a time", return_tensors="pt").input_ids
    out = hf.generate(st, max_new_tokens=60, do_sample=False)
    print(f"check_hf: HF greedy story {tok.decode(out[0])!r}")


if __name__ == "__main__":
    main()
