#!/usr/bin/python3
"""Renders the chat-template goldens in tests/golden/template/ with Python Jinja2.

The environment is the one transformers' apply_chat_template builds
(transformers/utils/chat_template_utils.py): ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks, the loopcontrols extension and the {% generation %} tag; a tojson filter that keeps non-ASCII; the
raise_exception and strftime_now globals. strftime_now is pinned to a fixed time so the
goldens are deterministic.

Writes, for every template in ../shared/testdata/templates/, <stem>.jsonl: one JSON object a
line with the inputs (messages, tools, add_generation_prompt, kwargs) and either "output" or
"error" (+ "raised": true when the template's own raise_exception fired). Also writes
features.jsonl: small templates from feature_cases.py exercising each supported construct,
rendered with the context written to features_context.json.

Usage (Debian's python3-jinja2; scripts/setup.sh installs it):
  /usr/bin/python3 tools/template/render_goldens.py [--templates DIR] [--out DIR]
Running it twice gives byte-identical files (everything is seeded or fixed).
"""
import argparse
import datetime
import json
import os
import random
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_NOW = datetime.datetime(2024, 7, 26, 13, 5, 9)


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    pass


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %} as transformers' AssistantTracker renders it when
    no assistant mask is requested: the body, as a call block."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise RaisedByTemplate(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# Special tokens as each model's tokenizer_config.json sets them (transformers passes
# tokenizer.special_tokens_map, which leaves out the unset ones).
SPECIAL_TOKENS = {
    "Qwen-Qwen3": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "Qwen-Qwen2.5-7B-Instruct": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": {
        "bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>",
        "pad_token": "<｜end▁of▁sentence｜>"},
    "google-gemma-2-2b-it": {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>",
                             "pad_token": "<pad>"},
    "meta-llama-Llama-3.1-8B-Instruct": {"bos_token": "<|begin_of_text|>",
                                         "eos_token": "<|eot_id|>"},
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": {"bos_token": "<|begin_of_text|>",
                                                    "eos_token": "<|im_end|>"},
    "microsoft-Phi-3.5-mini-instruct": {"bos_token": "<s>", "eos_token": "<|endoftext|>",
                                        "unk_token": "<unk>", "pad_token": "<|endoftext|>"},
    "mistralai-Mistral-Nemo-Instruct-2407": {"bos_token": "<s>", "eos_token": "</s>",
                                             "unk_token": "<unk>"},
}
DEFAULT_SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "description": "Temperature unit"},
                "days": {"type": "integer", "description": "Forecast days"},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web for \"quoted\" terms.\nReturns snippets.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for"},
                "limit": {"type": "number", "description": "Max results"},
                "safe": {"type": "boolean", "description": "Safe search"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags"},
                "lang": {"type": ["string", "integer"], "description": "Language or locale id"},
                "extra": {"type": "object", "additionalProperties": {"type": "integer"},
                          "description": "Extra options"},
            },
            "required": ["query"],
        },
        "return": {"type": "string", "description": "The snippets"},
    },
}
NULL_UNION_TOOL = {
    "type": "function",
    "function": {"name": "pick", "description": "Pick.",
                 "parameters": {"type": "object",
                                "properties": {"v": {"type": ["string", "null"], "description": "V"}}}},
}
EMPTY_TOOL = {
    "type": "function",
    "function": {"name": "now", "description": "Current time.",
                 "parameters": {"type": "object", "properties": {}}},
}


def call(name, args, call_id):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def handmade_conversations():
    S = {"role": "system", "content": "You are a helpful assistant."}
    convs = [
        ("user-only", [{"role": "user", "content": "Hello!"}], None),
        ("system-user", [S, {"role": "user", "content": "What is 2+2?"}], None),
        ("multi-turn", [S, {"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": "Hello! How can I help?"},
                        {"role": "user", "content": "Tell me a joke."}], None),
        ("no-system-multi", [{"role": "user", "content": "One"},
                             {"role": "assistant", "content": "Two"},
                             {"role": "user", "content": "Three"},
                             {"role": "assistant", "content": "Four"}], None),
        ("unicode", [{"role": "system", "content": "Réponds en français. 日本語もOK 🙂"},
                     {"role": "user", "content": "Ça va? \"quotes\" and 'single' \\ backslash\n\tTabbed line\n\nEnd."},
                     {"role": "assistant", "content": "Très bien — 谢谢! 👍"},
                     {"role": "user", "content": "{\"json\": [1, 2]} <b>tags</b> & {{ not jinja }} {% raw %}"}],
         None),
        ("whitespace", [{"role": "system", "content": "  padded system  \n"},
                        {"role": "user", "content": "\n  leading and trailing  \n\n"}], None),
        ("think-in-content", [{"role": "user", "content": "Solve x+1=3"},
                              {"role": "assistant",
                               "content": "<think>\nSubtract 1 from both sides.\n</think>\n\nx = 2"},
                              {"role": "user", "content": "And x+2=5?"}], None),
        ("reasoning-field", [{"role": "user", "content": "Capital of France?"},
                             {"role": "assistant", "content": "Paris.",
                              "reasoning_content": "The user asks a geography question."},
                             {"role": "user", "content": "And of Italy?"},
                             {"role": "assistant", "content": "<think>easy</think>Rome."}], None),
        ("empty-content", [{"role": "user", "content": ""}], None),
        ("assistant-first", [{"role": "assistant", "content": "I speak first."},
                             {"role": "user", "content": "Odd."}], None),
        ("system-only", [S], None),
        ("two-users", [{"role": "user", "content": "first"}, {"role": "user", "content": "second"}],
         None),
        ("tools-user", [S, {"role": "user", "content": "Weather in Paris?"}],
         [WEATHER_TOOL, SEARCH_TOOL]),
        ("tools-no-system", [{"role": "user", "content": "Search for cats"}], [SEARCH_TOOL, EMPTY_TOOL]),
        ("tool-call-roundtrip", [
            S, {"role": "user", "content": "Weather in Zürich?"},
            {"role": "assistant", "content": None,
             "tool_calls": [call("get_weather", {"city": "Zürich", "unit": "celsius"}, "abc123xyz")]},
            {"role": "tool", "content": "{\"temp\": 21, \"sky\": \"sunny\"}", "tool_call_id": "abc123xyz"},
            {"role": "assistant", "content": "It is 21 °C and sunny in Zürich."},
            {"role": "user", "content": "Thanks!"}], [WEATHER_TOOL]),
        ("parallel-tool-calls", [
            {"role": "user", "content": "Weather in Paris and Rome"},
            {"role": "assistant", "content": "",
             "tool_calls": [call("get_weather", {"city": "Paris"}, "call00001"),
                            call("get_weather", {"city": "Rome", "days": 3}, "call00002")]},
            {"role": "tool", "content": "18C", "tool_call_id": "call00001"},
            {"role": "tool", "content": "25C", "tool_call_id": "call00002"}], [WEATHER_TOOL]),
        ("tool-call-with-text", [
            {"role": "user", "content": "Find news"},
            {"role": "assistant", "content": "Let me search.",
             "tool_calls": [call("search", {"query": "news", "tags": ["a", "b"], "safe": True,
                                            "limit": 2.5, "lang": None}, "srch12345")]},
            {"role": "tool", "content": "no results", "tool_call_id": "srch12345"}],
         [SEARCH_TOOL]),
        ("tool-call-no-tools", [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None,
             "tool_calls": [call("now", {}, "nowcall01")]},
            {"role": "tool", "content": "12:00", "tool_call_id": "nowcall01"}], None),
        ("tools-empty-messages-after-system", [S], [EMPTY_TOOL]),
        # Hermes' json_to_python_type recurses forever on an unknown union member: a hostile
        # case both Jinja2 (RecursionError) and ours (depth limit) must fail.
        ("tools-union-null", [{"role": "user", "content": "hi"}], [NULL_UNION_TOOL]),
    ]
    return convs


WORDS = ["alpha", "beta", "γάμμα", "delta", "日本", "emoji🙂", "new\nline", "tab\there", "quote\"d",
         "it's", "back\\slash", "  spaced  ", "<tag>", "{{x}}", "end."]


def random_conversations(rng, n):
    convs = []
    for i in range(n):
        msgs = []
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": " ".join(rng.choice(WORDS) for _ in range(4))})
        for _ in range(rng.randint(1, 4)):
            msgs.append({"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))})
            msgs.append({"role": "assistant", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))})
        if rng.random() < 0.6:
            msgs.pop()  # end on a user turn
        convs.append(("random-%02d" % i, msgs, None))
    return convs


def variants(stem):
    out = []
    for agp in (True, False):
        if stem == "Qwen-Qwen3":
            for think in (None, True, False):
                kw = {} if think is None else {"enable_thinking": think}
                out.append((agp, kw))
        elif stem == "meta-llama-Llama-3.1-8B-Instruct" and not agp:
            out.append((agp, {"date_string": "01 Jan 2025"}))
        else:
            out.append((agp, {}))
    return out


def render_case(env, template, messages, tools, agp, kwargs):
    try:
        out = template.render(messages=messages, tools=tools, documents=None,
                              add_generation_prompt=agp, **kwargs)
        return {"output": out}
    except RaisedByTemplate as e:
        return {"error": e.message, "raised": True}
    except Exception as e:  # any other Jinja2/Python error: ours must fail too
        return {"error": "%s: %s" % (type(e).__name__, e)}


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False, sort_keys=False) + "\n")


def render_templates(env, templates_dir, out_dir):
    rng = random.Random(20240726)
    convs = handmade_conversations() + random_conversations(rng, 12)
    for name in sorted(os.listdir(templates_dir)):
        if not name.endswith(".jinja"):
            continue
        stem = name[: -len(".jinja")]
        with open(os.path.join(templates_dir, name), encoding="utf-8") as f:
            template = env.from_string(f.read())
        special = SPECIAL_TOKENS.get(stem, DEFAULT_SPECIAL)
        records = []
        for conv_id, messages, tools in convs:
            if "tool_use" in stem and tools is None:
                tools = [WEATHER_TOOL, EMPTY_TOOL]  # a tool_use template is only used with tools
            for agp, extra in variants(stem):
                kwargs = dict(special)
                kwargs.update(extra)
                rec = {"id": "%s/agp=%d%s" % (conv_id, agp, "".join("/%s=%s" % kv for kv in extra.items())),
                       "messages": messages, "tools": tools, "add_generation_prompt": agp,
                       "kwargs": kwargs}
                rec.update(render_case(env, template, messages, tools, agp, kwargs))
                records.append(rec)
        write_jsonl(os.path.join(out_dir, stem + ".jsonl"), records)
        n_err = sum(1 for r in records if "error" in r)
        print("%s: %d cases (%d errors)" % (stem, len(records), n_err))


def render_features(env, out_dir):
    from feature_cases import CONTEXT, FEATURES  # noqa: E402 (tools/template/feature_cases.py)
    records = []
    for i, source in enumerate(FEATURES):
        rec = {"id": "feature-%03d" % i, "template": source}
        try:
            rec.update(render_case(env, env.from_string(source), CONTEXT["messages"], CONTEXT["tools"],
                                   True, {k: v for k, v in CONTEXT.items() if k not in ("messages", "tools")}))
        except jinja2.exceptions.TemplateSyntaxError as e:
            rec.update({"error": "TemplateSyntaxError: %s" % e, "syntax": True})
        records.append(rec)
    write_jsonl(os.path.join(out_dir, "features.jsonl"), records)
    with open(os.path.join(out_dir, "features_context.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(CONTEXT, ensure_ascii=False, indent=1) + "\n")
    print("features: %d cases (%d errors)" % (len(records), sum(1 for r in records if "error" in r)))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--templates", default=os.path.join(root, "..", "shared", "testdata", "templates"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "golden", "template"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    sys.path.insert(0, here)
    env = make_env()
    print("jinja2 %s" % jinja2.__version__)
    render_templates(env, args.templates, args.out)
    render_features(env, args.out)


if __name__ == "__main__":
    main()
