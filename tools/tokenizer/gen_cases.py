#!/usr/bin/env python3
"""Seeded random tokenizer test strings, one JSON object {"text": ...} per line.

Mixes scripts (Latin with composed and decomposed accents, Greek, Cyrillic, Arabic, Hebrew,
Devanagari, Thai, CJK, Hangul syllables and jamo, kana), whitespace runs (spaces, tabs, CR/LF,
NBSP, ideographic and other Unicode spaces), code, English contractions in any case, numbers
of several scripts, emoji with ZWJ sequences, skin tones, flags and variation selectors,
combining marks, special-token strings of many families (whole, partial, adjacent), and
invalid-looking text (control characters, literal <0xXX>, U+FFFD, BOM, ▁). Only code points
assigned in the installed Unicode Character Database are used, so a reference built on a newer
Unicode version classifies them the same way.

usage: gen_cases.py --seed 1 --count 20000 > cases.jsonl
"""
import argparse
import json
import random
import unicodedata

WORDS = ["the", "Hello", "world", "tokenizer", "naïve", "café", "straße", "über", "Ωmega", "привет",
         "мир", "Γειά", "σου", "مرحبا", "שלום", "नमस्ते", "สวัสดี", "你好", "世界", "こんにちは",
         "カタカナ", "안녕하세요", "한국어", "llama", "qwen", "GPT", "iPhone", "x86_64", "UTF-8",
         "e-mail", "co-operate", "Führer", "ℌello", "ﬁnance", "Ⅻ", "½", "²", "٣٤٥", "１２３", "ǅemal"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL",
                "'D", "'x", "''", "’s", "'ſ"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "\u00a0", "\u3000",
          "\u2009", "\u200b", "\u2028", "\u000b", "\u000c", "\u0085", "\u1680", "\u202f", " \t \n"]
CODE = ["def f(x):\n    return x**2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
        "if x != None and y >= 3:", "#include <stdio.h>", "console.log(`${a}+${b}`);",
        "SELECT * FROM t WHERE id=42;", "<div class=\"a\">&nbsp;</div>", "a->b->c", "x := y << 2",
        "{\"key\": [1, 2.5e-3, null]}", "    ", "\t\t", "!==", "/* comment */", "// TODO: fix",
        "$HOME/.bashrc", "https://example.com/path?q=1&r=2#frag", "0x1F600", "3.14159", "1,234,567"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵", "❤️", "☺︎", "🦙", "🧑🏿‍💻", "👩‍❤️‍💋‍👨",
         "✊🏻", "🫠", "1️⃣", "#️⃣", "🏴‍☠️", "🐈‍⬛"]
SPECIALS = ["<s>", "</s>", "<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>",
            "</think>", "<tool_call>", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|reserved_special_token_0|>", "<fim_prefix>", "<fim_middle>",
            "<|user|>", "<|assistant|>", "<|end|>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
            "<|im_start", "im_end|>", "<|", "|>", "<s", "s>", "<|fim_prefix|>"]
INVALIDISH = ["<0x41>", "<0xFF>", "\ufffd", "\ufeff", "▁", "▁▁x", "\x00", "\x01\x02", "\x1b[31m",
              "\x7f", "\\x00", "\\u0041", "\u200d", "\u200e", "\u2060", "\ue000", "\U000f0000",
              "&#x41;", "%20", "\u0301", "\u0345", "\u0e33"]
MARKS = [chr(c) for c in range(0x300, 0x370)] + ["\u0483", "\u05b4", "\u064b", "\u093c", "\u0e31",
                                                  "\u3099", "\u309a", "\u20dd", "\ufe0f"]
BLOCKS = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
          (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x1E00, 0x1FFF), (0x2000, 0x2BFF),
          (0x3000, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF),
          (0x1D400, 0x1D7FF), (0x1F300, 0x1FAFF), (0x10400, 0x1044F), (0x20000, 0x2A6DF)]


def assigned(c):
    return unicodedata.category(chr(c)) not in ("Cn", "Cs")


def random_char(rng):
    while True:
        lo, hi = rng.choice(BLOCKS)
        c = rng.randint(lo, hi)
        if assigned(c):
            return chr(c)


def any_char(rng):
    while True:
        c = rng.randint(0, 0x10FFFF) if rng.random() < 0.5 else rng.randint(0, 0x2FFFF)
        if assigned(c):
            return chr(c)


def with_marks(rng, word):
    out = []
    for ch in word:
        out.append(ch)
        while rng.random() < 0.3:
            out.append(rng.choice(MARKS))
    return "".join(out)


def fragment(rng):
    r = rng.random()
    if r < 0.22:
        w = rng.choice(WORDS)
        form = rng.random()
        if form < 0.15:
            w = unicodedata.normalize("NFD", w)
        elif form < 0.25:
            w = w.upper()
        elif form < 0.35:
            w = with_marks(rng, w)
        return w
    if r < 0.32:
        return rng.choice(WORDS) + rng.choice(CONTRACTIONS)
    if r < 0.47:
        return rng.choice(SPACES) * rng.randint(1, 3)
    if r < 0.55:
        return rng.choice(CODE)
    if r < 0.62:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3)))
    if r < 0.69:
        return rng.choice(SPECIALS)
    if r < 0.75:
        return rng.choice(INVALIDISH)
    if r < 0.82:
        return str(rng.randint(0, 10 ** rng.randint(1, 12)))
    if r < 0.93:
        return "".join(random_char(rng) for _ in range(rng.randint(1, 8)))
    if r < 0.97:
        return "".join(any_char(rng) for _ in range(rng.randint(1, 4)))
    return rng.choice(["a", "1", "!", " ", "\n", "é", "字"]) * rng.randint(20, 120)


def case(rng):
    n = rng.choice([1, 1, 2, 3, 4, 6, 8, 12, 20])
    joiners = ["", "", " ", " ", "\n"]
    return "".join(fragment(rng) + rng.choice(joiners) for _ in range(n))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=20000)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    out = []
    for _ in range(args.count):
        out.append(json.dumps({"text": case(rng)}, ensure_ascii=False))
    print("\n".join(out))


if __name__ == "__main__":
    main()
