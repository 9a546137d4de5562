#!/usr/bin/env python3
"""Builds the training and held-out text for the 1bit model family (issue 8).

Reads ../shared/testdata/text (TinyStories head, tiny-shakespeare, War and Peace) and the
project's own sources and docs, makes short chat-formatted samples from the same text, and
writes one JSON-lines file per split: {"domain": ..., "text": ...}. Needs only the standard
library; deterministic (fixed seed, files in sorted order).

  python3 tools/train/prepare_data.py --text ../shared/testdata/text --repo . --out DIR
"""
import argparse
import hashlib
import json
import lzma
import os
import random
import re

SEED = 1234
CODE_EXT = (".h", ".cpp", ".cu", ".py", ".md", ".txt", ".cmake", ".sh")
CODE_DIRS = ("src", "tests", "tools", "bench", "docs", "scripts", "fuzz")
MAX_CODE_FILE_BYTES = 200_000  # skips generated tables (UCD) that would swamp the code domain
HELDOUT_FRACTION = 0.04

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
EMPTY_THINK = "<think>\n\n</think>\n\n"


def chat(user, answer, system=None):
    """One conversation in the Qwen3 format with an empty think block, as the template writes
    it for enable_thinking=false; ends with <|im_end|> so the end of turn is learned."""
    s = ""
    if system:
        s += f"{IM_START}system\n{system}{IM_END}\n"
    s += f"{IM_START}user\n{user}{IM_END}\n"
    s += f"{IM_START}assistant\n{EMPTY_THINK}{answer}{IM_END}\n"
    return s


def split_stories(text):
    """TinyStories head: one story per run of lines, paragraphs split by blank lines; a story
    ends where a non-empty line follows a non-empty line."""
    stories, cur = [], []
    prev_blank = True
    for line in text.split("\n"):
        if line.strip() and not prev_blank and cur:
            stories.append("\n".join(cur).strip())
            cur = []
        cur.append(line)
        prev_blank = not line.strip()
    if cur and "".join(cur).strip():
        stories.append("\n".join(cur).strip())
    return [s for s in stories if len(s) > 40]


def split_stories_blank(text):
    """TinyStories valid head: stories and paragraphs are both split by blank lines, so a story
    starts at "Once upon a time" or after about 1,500 characters."""
    out, cur = [], ""
    for p in re.split(r"\n\s*\n", text):
        p = p.strip()
        if not p:
            continue
        if cur and (p.startswith("Once upon a time") or len(cur) > 1500):
            out.append(cur)
            cur = ""
        cur = cur + "\n\n" + p if cur else p
    if cur:
        out.append(cur)
    return out


def chunk_paragraphs(text, target_chars):
    """Long prose (plays, novels) cut at blank lines into pieces of about target_chars."""
    paras = re.split(r"\n\s*\n", text)
    out, cur = [], ""
    for p in paras:
        p = p.strip("\n")
        if not p.strip():
            continue
        if cur and len(cur) + len(p) > target_chars:
            out.append(cur)
            cur = ""
        cur = cur + "\n\n" + p if cur else p
    if cur:
        out.append(cur)
    return out


def first_sentence(s):
    m = re.match(r"(.+?[.!?])(\s|$)", s.replace("\n", " "))
    return m.group(1) if m else s[:80]


def hash_frac(name):
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def story_chats(stories, rng):
    out = []
    for s in stories:
        words = re.findall(r"\b[a-z]{4,}\b", s)
        kind = rng.randrange(4)
        if kind == 0 and words:
            out.append(chat(f"Tell me a short story about {rng.choice(words)}.", s))
        elif kind == 1:
            first = first_sentence(s)
            out.append(chat(f"Continue this story: {first}", s[len(first):].strip() or s))
        elif kind == 2:
            out.append(chat("Write a story for a small child.", s))
        else:
            out.append(chat("What is this story about, in one sentence?\n\n" + s, first_sentence(s)))
    return out


def prose_chats(pieces, source, rng):
    out = []
    for p in pieces:
        lines = [l for l in p.split("\n") if l.strip()]
        if len(lines) < 2:
            continue
        cut = max(1, len(lines) // 3)
        head, tail = "\n".join(lines[:cut]), "\n".join(lines[cut:])
        q = rng.choice([f"Continue this passage from {source}:\n\n",
                        f"Here is the start of a passage from {source}. What comes next?\n\n"])
        out.append(chat(q + head, tail))
    return out


def code_chats(files, rng):
    """Question/answer pairs over the project's own code: the answer is a piece of the file."""
    out = []
    for path, text in files:
        pieces = chunk_paragraphs(text, 1200)
        for p in pieces[:3]:
            q = rng.choice([f"Show me part of {path} from the 1bit project.",
                            f"What does this code from {path} do? Continue it.\n\n" + p[:200]])
            out.append(chat(q, p))
    return out


def code_files(repo):
    files = []
    for d in CODE_DIRS:
        root = os.path.join(repo, d)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(x for x in dirnames if not x.startswith(".") and x != "out")
            for f in sorted(filenames):
                if not f.endswith(CODE_EXT):
                    continue
                full = os.path.join(dirpath, f)
                rel = os.path.relpath(full, repo)
                if rel.startswith("tools/train/"):
                    continue  # our own scripts change while we train; keep the data stable
                if os.path.getsize(full) > MAX_CODE_FILE_BYTES:
                    continue
                try:
                    with open(full, encoding="utf-8") as fh:
                        files.append((rel, fh.read()))
                except UnicodeDecodeError:
                    continue
    for f in ("README.md", "CMakeLists.txt", "Makefile"):
        full = os.path.join(repo, f)
        if os.path.exists(full):
            with open(full, encoding="utf-8") as fh:
                files.append((f, fh.read()))
    return files


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", default="../shared/testdata/text")
    ap.add_argument("--repo", default=".")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = random.Random(SEED)
    train, heldout = [], []

    def add(domain, texts, held):
        for t in texts:
            (heldout if held else train).append({"domain": domain, "text": t})

    # Stories: the train head trains; the valid head gives the held-out prose and chat prompts,
    # and its second half trains too (there is little text).
    st_train = split_stories(read(os.path.join(args.text, "tinystories_train_head.txt")))
    st_valid = split_stories_blank(read(os.path.join(args.text, "tinystories_valid_head.txt")))
    n_held = 200
    add("story", st_train + st_valid[n_held:], False)
    add("story", st_valid[:n_held], True)
    add("chat", story_chats(st_train[:1500] + st_valid[n_held:n_held + 300], rng), False)
    add("chat", story_chats(st_valid[:60], rng), True)

    for name, src, size in (("shakespeare", "tinyshakespeare.txt", 1500),
                            ("war-and-peace", "war-and-peace.txt", 2000)):
        pieces = chunk_paragraphs(read(os.path.join(args.text, src)), size)
        n = max(8, int(len(pieces) * HELDOUT_FRACTION))
        label = "Shakespeare" if name == "shakespeare" else "War and Peace"
        add("prose", pieces[:-n], False)
        add("prose", pieces[-n:], True)
        add("chat", prose_chats(rng.sample(pieces[:-n], min(250, len(pieces) - n)), label, rng), False)
        add("chat", prose_chats(pieces[-n:][:20], label, rng), True)

    files = code_files(args.repo)
    held_files = [f for f in files if hash_frac(f[0]) < 0.12 and not f[0].endswith(".md")]
    train_files = [f for f in files if f not in held_files]
    # Code repeats twice: it is the smallest domain and the one speculative decoding is judged on.
    for _ in range(2):
        add("code", [f"// {p}\n{t}" for p, t in train_files], False)
    add("code", [f"// {p}\n{t}" for p, t in held_files], True)
    add("chat", code_chats(train_files, rng), False)
    add("chat", code_chats(held_files, rng)[:40], True)

    rng.shuffle(train)
    os.makedirs(args.out, exist_ok=True)
    stats = {}
    for split, rows in (("train", train), ("heldout", heldout)):
        with lzma.open(os.path.join(args.out, f"{split}.jsonl.xz"), "wt", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        for r in rows:
            k = f"{split}/{r['domain']}"
            stats[k] = stats.get(k, 0) + len(r["text"])
    stats["heldout_code_files"] = [p for p, _ in held_files]
    with open(os.path.join(args.out, "data_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps({k: v for k, v in stats.items() if not k.startswith("heldout_code")}))


if __name__ == "__main__":
    main()
