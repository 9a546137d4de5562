"""The family's tokenizer: byte-level BPE with the Qwen2 pre-tokenizer and Qwen3 chat specials,
trained with Hugging Face `tokenizers`, plus the tokenizer_config.json (chat template) and
generation_config.json that go beside it. `ByteTokenizer` is a stand-in with the same interface
for testing the pipeline where `tokenizers` is not installed (never shipped).
"""
import json
import os

# Qwen2's pre-tokenizer split (the regular expression of Qwen2/Qwen3's tokenizer.json).
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]   # special: never split, skipped on decode
THINK = ["<think>", "</think>"]                              # added but not special, as in Qwen3

# Our own chat template in the Qwen3 format: ChatML turns, and for enable_thinking=false an empty
# think block after the assistant header. Earlier assistant turns drop their reasoning.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{%- set content = message['content'] %}"
    "{%- if '</think>' in content %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)


def train_hf(texts, vocab_size, out_dir):
    """Trains the BPE on an iterable of strings; writes tokenizer.json; returns HfTokenizer."""
    from tokenizers import Tokenizer, Regex, AddedToken, decoders, models, normalizers
    from tokenizers import pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    n_added = len(SPECIAL) + len(THINK)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - n_added, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIAL])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in THINK])
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "tokenizer.json")
    tok.save(path)
    # Spell the decoder and post-processor the way Qwen's tokenizer.json does.
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    j["decoder"], j["post_processor"] = dict(bl), dict(bl)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)
    return HfTokenizer(path)


class HfTokenizer:
    def __init__(self, path):
        from tokenizers import Tokenizer
        self.t = Tokenizer.from_file(path)
        self.vocab_size = self.t.get_vocab_size()
        self.ids = {s: self.t.token_to_id(s) for s in SPECIAL + THINK}

    def encode_batch(self, texts):
        return [e.ids for e in self.t.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids):
        return self.t.decode(ids, skip_special_tokens=False)


class ByteTokenizer:
    """Test stand-in: bytes 0..255, then the added tokens."""

    def __init__(self):
        self.vocab_size = 256 + len(SPECIAL) + len(THINK)
        self.ids = {s: 256 + i for i, s in enumerate(SPECIAL + THINK)}

    def encode_batch(self, texts):
        out = []
        for t in texts:
            ids, i = [], 0
            while i < len(t):
                for s, sid in self.ids.items():
                    if t.startswith(s, i):
                        ids.append(sid)
                        i += len(s)
                        break
                else:
                    j = i
                    while j < len(t) and t[j] != "<":
                        j += 1
                    j = max(j, i + 1)
                    ids.extend(t[i:j].encode("utf-8"))
                    i = j
            out.append(ids)
        return out

    def decode(self, ids):
        inv = {v: k for k, v in self.ids.items()}
        b = b"".join(inv[i].encode() if i in inv else bytes([i]) for i in ids)
        return b.decode("utf-8", errors="replace")


def write_configs(out_dir, tok, max_len):
    """tokenizer_config.json (Qwen2Tokenizer, chat template) and generation_config.json."""
    decoder = {}
    for s in SPECIAL + THINK:
        decoder[str(tok.ids[s])] = {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                    "single_word": False, "special": s in SPECIAL}
    cfg = {
        "add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "bos_token": None,
        "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>", "errors": "replace", "model_max_length": max_len,
        "pad_token": "<|endoftext|>", "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
    gen = {"bos_token_id": tok.ids["<|endoftext|>"],
           "eos_token_id": [tok.ids["<|im_end|>"], tok.ids["<|endoftext|>"]],
           "pad_token_id": tok.ids["<|endoftext|>"], "do_sample": False}
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=1)
