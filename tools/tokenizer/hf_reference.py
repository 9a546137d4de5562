#!/usr/bin/env python3
"""Hugging Face `tokenizers` reference ids for tokenizer test cases, per family.

For each family it builds a `tokenizers.Tokenizer`:
  qwen2, llama-bpe   the real tokenizer.json (tokenizers/qwen3, tokenizers/llama3);
  gpt-2, starcoder, deepseek-llm
                     rebuilt from the GGUF's tokenizer.ggml.* keys (read by gguf_vocab.py, no
                     `gguf` package needed): BPE(vocab, merges) with the family's pre-tokenizer
                     as in the published tokenizer.json (ByteLevel regex; Digits + ByteLevel;
                     deepseek-llm's Split sequence), control tokens as special added tokens and
                     user-defined tokens as non-special added tokens;
  tinystories-656k   the real tokenizer.json of models/tinystories-656K (SentencePiece-style BPE);
  llama-spm, phi-3   rebuilt as transformers' LlamaConverter (legacy) builds Llama/Phi-3 fast
                     tokenizers: BPE with byte_fallback and merges from the vocabulary ordered by
                     score (SentencePieceExtractor), normalizer Prepend("▁") + Replace(" ", "▁").
Before the cases, each rebuilt tokenizer must reproduce llama.cpp's .inp/.out vectors (ids that
HF produced with the original tokenizer.json), which checks the reconstruction.

usage: hf_reference.py --data DIR --cases cases.jsonl --out OUTDIR [--families a,b/nospecial]
DIR holds vocab/ggml-vocab-*.gguf(.inp/.out) and tokenizers/{qwen3,llama3}/tokenizer.json
(the layout of ../shared/testdata). Writes OUTDIR/hf_FAMILY.txt.gz (one line of ids per case,
add_special_tokens=False, special tokens parsed) and OUTDIR/report.txt.
"""
import argparse
import gzip
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_vocab import read_metadata  # noqa: E402

import tokenizers  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers  # noqa: E402

DEEPSEEK_LETTERS = [
    (0x41, 0x5A), (0x61, 0x7A), (0xB5, 0xB5), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x1BA), (0x1BC, 0x1BF),
    (0x1C4, 0x293), (0x295, 0x2AF), (0x370, 0x373), (0x376, 0x377), (0x37B, 0x37D), (0x37F, 0x37F),
    (0x386, 0x386), (0x388, 0x38A), (0x38C, 0x38C), (0x38E, 0x3A1), (0x3A3, 0x3F5), (0x3F7, 0x481),
    (0x48A, 0x52F), (0x531, 0x556), (0x10A0, 0x10C5), (0x13A0, 0x13F5), (0x13F8, 0x13FD),
    (0x1C90, 0x1CBA), (0x1CBD, 0x1CBF), (0x1D00, 0x1D2B), (0x1D6B, 0x1D77), (0x1D79, 0x1D9A),
    (0x1E00, 0x1F15), (0x1F18, 0x1F1D), (0x1F20, 0x1F45), (0x1F48, 0x1F4D), (0x1F50, 0x1F57),
    (0x1F59, 0x1F59), (0x1F5B, 0x1F5B), (0x1F5D, 0x1F5D), (0x1F5F, 0x1F7D), (0x1F80, 0x1FB4),
    (0x1FB6, 0x1FBC), (0x1FBE, 0x1FBE), (0x1FC2, 0x1FC4), (0x1FC6, 0x1FCC), (0x1FD0, 0x1FD3),
    (0x1FD6, 0x1FDB), (0x1FE0, 0x1FEC), (0x1FF2, 0x1FF4), (0x1FF6, 0x1FFC), (0x2102, 0x2102),
    (0x2107, 0x2107), (0x210A, 0x2113), (0x2115, 0x2115), (0x2119, 0x211D), (0x2124, 0x2124),
    (0x2126, 0x2126), (0x2128, 0x2128), (0x212A, 0x212D), (0x212F, 0x2134), (0x2139, 0x2139),
    (0x213C, 0x213F), (0x2145, 0x2149), (0x214E, 0x214E), (0x2183, 0x2184), (0x2C00, 0x2C7B),
    (0x2C7E, 0x2CE4), (0x2CEB, 0x2CEE), (0x2CF2, 0x2CF3), (0xA640, 0xA66D), (0xA680, 0xA69B),
    (0xA722, 0xA76F), (0xA771, 0xA787), (0xA78B, 0xA78E), (0xAB70, 0xABBF), (0xFB00, 0xFB06),
    (0xFB13, 0xFB17), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0x10400, 0x1044F), (0x104B0, 0x104D3),
    (0x104D8, 0x104FB), (0x10C80, 0x10CB2), (0x10CC0, 0x10CF2), (0x118A0, 0x118DF), (0x1E900, 0x1E943)]


def char_class(ranges):
    return "".join("\\x{%X}-\\x{%X}" % r if r[0] != r[1] else "\\x{%X}" % r[0] for r in ranges)


def deepseek_pre():
    splits = ["[\\r\\n]",
              "\\s?[" + char_class(DEEPSEEK_LETTERS) + "]+",
              "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
              "\\s+$",
              "[一-龥ࠀ-一가-퟿]+",
              "\\p{N}+"]
    seq = [pre_tokenizers.Split(Regex(r), "isolated") for r in splits]
    seq.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    return pre_tokenizers.Sequence(seq)


def vocab_of(tokens):
    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    return vocab


def add_specials(tok, tokens, types):
    special = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty in (2, 3) and t]
    user = [AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == 4 and t]
    tok.add_special_tokens(special)
    tok.add_tokens(user)


def byte_level_from_gguf(meta, family):
    tokens = meta["tokenizer.ggml.tokens"]
    types = meta.get("tokenizer.ggml.token_type", [1] * len(tokens))
    vocab = vocab_of(tokens)
    merges = []
    for m in meta["tokenizer.ggml.merges"]:
        a, _, b = m.partition(" ")
        if a in vocab and b in vocab and a + b in vocab:  # tokenizers refuses others at load
            merges.append((a, b))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    if family == "gpt-2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif family == "starcoder":
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    elif family == "deepseek-llm":
        tok.pre_tokenizer = deepseek_pre()
    tok.decoder = decoders.ByteLevel()
    add_specials(tok, tokens, types)
    return tok


def spm_from_gguf(meta):
    tokens = meta["tokenizer.ggml.tokens"]
    scores = meta["tokenizer.ggml.scores"]
    types = meta.get("tokenizer.ggml.token_type", [1] * len(tokens))
    vocab = vocab_of(tokens)
    merges = []
    for piece, score in zip(tokens, scores):  # transformers' SentencePieceExtractor.extract
        local = []
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in vocab and right in vocab:
                local.append((left, right, score))
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda x: x[2], reverse=True)
    unk = tokens[meta.get("tokenizer.ggml.unknown_token_id", 0)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(a, b) for a, b, _ in merges], unk_token=unk,
                               fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    try:  # decoding is not compared; an older `tokenizers` may lack one of these
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    except Exception:  # noqa: BLE001
        pass
    add_specials(tok, tokens, types)
    return tok


def build(family, data):
    if family == "tinystories-656k":
        return Tokenizer.from_file(os.path.join(data, "models/tinystories-656K/tokenizer.json"))
    if family == "qwen2":
        return Tokenizer.from_file(os.path.join(data, "tokenizers/qwen3/tokenizer.json"))
    if family == "llama-bpe":
        return Tokenizer.from_file(os.path.join(data, "tokenizers/llama3/tokenizer.json"))
    meta = read_metadata(os.path.join(data, "vocab/ggml-vocab-%s.gguf" % family))
    if meta["tokenizer.ggml.model"] == "llama":
        return spm_from_gguf(meta)
    return byte_level_from_gguf(meta, family)


def check_vectors(tok, family, data):
    base = os.path.join(data, "vocab/ggml-vocab-%s.gguf" % family)
    if not os.path.exists(base + ".inp"):
        return [], 0
    with open(base + ".inp", encoding="utf-8", newline="") as f:
        inputs = f.read().split("\n__ggml_vocab_test__\n")
    with open(base + ".out", encoding="utf-8") as f:
        outputs = f.read().split("\n")
    bad = []
    for text, line in zip(inputs, outputs):
        want = [int(x) for x in line.split()]
        got = tok.encode(text, add_special_tokens=False).ids
        if got != want:
            bad.append("%r want %s got %s" % (text[:80], want[:20], got[:20]))
    return bad, min(len(inputs), len(outputs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--families", default="gpt-2,llama-bpe,qwen2,deepseek-llm,starcoder,llama-spm,phi-3")
    args = ap.parse_args()
    with open(args.cases, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    os.makedirs(args.out, exist_ok=True)
    report = ["tokenizers %s, %d cases" % (tokenizers.__version__, len(texts))]
    for spec in args.families.split(","):
        # FAMILY/nospecial: special tokens written in the text stay text (encode_special_tokens,
        # transformers' split_special_tokens), as `1bit tokenize --no-special`.
        family, _, variant = spec.partition("/")
        try:
            t0 = time.time()
            tok = build(family, args.data)
            bad, total = check_vectors(tok, family, args.data)
            if variant == "nospecial":
                tok.encode_special_tokens = True
            encs = tok.encode_batch(texts, add_special_tokens=False)
            name = family + (".nospecial" if variant == "nospecial" else "")
            with gzip.open(os.path.join(args.out, "hf_%s.txt.gz" % name), "wt") as f:
                for e in encs:
                    f.write(" ".join(map(str, e.ids)) + "\n")
            report.append("%s: vectors %d/%d mismatched; %d cases in %.1fs" % (spec, len(bad), total, len(texts), time.time() - t0))
            report.extend("  " + b for b in bad[:5])
        except Exception as e:  # one family's failure must not lose the others
            report.append("%s: FAILED %r" % (spec, e))
        print(report[-1], flush=True)
    with open(os.path.join(args.out, "report.txt"), "w") as f:
        f.write("\n".join(report) + "\n")


if __name__ == "__main__":
    main()
