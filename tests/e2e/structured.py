#!/usr/bin/env python3
"""Structured output through `1bit serve` (issue 18): every schema of tests/grammar/schemas.json
over /v1/chat/completions and /v1/completions, streamed and not, seeded sampling with n choices;
every reply must end with finish_reason "stop" and validate against its schema (Python's
jsonschema, tests/grammar/validate_json.py): within max_tokens (400 here) the grammar closes the
JSON in time. GBNF grammars (the `grammar` field) are checked with
Python's `re` on grammars that have a regular equivalent. Refusals: an unsupported keyword, a bad
grammar, two constraints at once are 400s that name the problem.
    structured.py --binary build/bin/1bit --model models/onebit-20m-q8_0.gguf [--per-schema 21]
Prints "structured: ok" at the end when everything held. Standard library + jsonschema."""
import argparse
import concurrent.futures
import http.client
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "grammar"))
from serve_util import Serve  # noqa: E402
import validate_json  # noqa: E402,F401  (fails early when jsonschema is missing)
import jsonschema  # noqa: E402


def post(port, path, body, stream=False):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if not stream or r.status != 200:
        data = r.read().decode()
        c.close()
        return r.status, json.loads(data) if data else None
    texts, finish = {}, {}
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        for ch in chunk.get("choices", []):
            i = ch["index"]
            piece = ch.get("delta", {}).get("content") if "delta" in ch else ch.get("text")
            texts[i] = texts.get(i, "") + (piece or "")
            if ch.get("finish_reason"):
                finish[i] = ch["finish_reason"]
    c.close()
    return 200, {"choices": [{"index": i, "text": texts.get(i, ""), "finish_reason": finish.get(i)} for i in sorted(texts)]}


def replies(status, body, chat, stream):
    if status != 200:
        raise RuntimeError(f"status {status}: {body}")
    out = []
    for ch in body["choices"]:
        if stream:
            out.append((ch["text"], ch["finish_reason"]))
        elif chat:
            out.append((ch["message"]["content"], ch["finish_reason"]))
        else:
            out.append((ch["text"], ch["finish_reason"]))
    return out


def request(port, index, schema, k, n):
    chat = k % 2 == 0
    stream = (k // 2) % 2 == 1
    body = {"max_tokens": 400, "temperature": 0.8, "seed": 1000 * index + k, "n": n, "stream": stream}
    if k % 3 == 2:
        body["json_schema"] = schema  # llama-server's field
    else:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": f"s{index}", "schema": schema, "strict": True}}
    if chat:
        body["messages"] = [{"role": "user", "content": "Reply with JSON."}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = "JSON:"
        path = "/v1/completions"
    status, reply = post(port, path, body, stream)
    return [(index, text, finish, chat, stream) for text, finish in replies(status, reply, chat, stream)]


def check_schemas(port, schemas, per_schema, n):
    failures, samples = [], []
    jobs = []
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for i, s in enumerate(schemas):
            for k in range(per_schema // n):
                jobs.append(pool.submit(request, port, i, s["schema"], k, n))
        for job in jobs:
            samples.extend(job.result())
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    n_stop = 0
    for index, text, finish, chat, stream in samples:
        where = f"schema {index} ({schemas[index]['name']}), {'chat' if chat else 'completions'}, {'stream' if stream else 'plain'}"
        if finish != "stop":
            failures.append(f"{where}: finish_reason {finish}: {text[:200]!r}")
            continue
        n_stop += 1
        try:
            jsonschema.Draft202012Validator(schemas[index]["schema"], format_checker=checker).validate(json.loads(text))
        except Exception as e:  # noqa: BLE001
            failures.append(f"{where}: {type(e).__name__}: {str(e).splitlines()[0][:160]}: {text[:200]!r}")
    kinds = {(c, s) for _, _, _, c, s in samples}
    print(f"structured: {len(samples)} replies over {len(schemas)} schemas ({len(kinds)} endpoint/stream kinds): "
          f"{n_stop} ended with their JSON and validated, {len(failures)} failed")
    return failures


# GBNF grammars and their regular equivalents (Python's re is the reference).
GRAMMARS = [
    (r'root ::= "yes" | "no" | "maybe"', r"yes|no|maybe"),
    (r'root ::= [A-Z] [a-z]{2,8} " " [0-9]{1,3} ("!" | "?")', r"[A-Z][a-z]{2,8} [0-9]{1,3}[!?]"),
    ("root ::= item (\",\" item){0,4}\nitem ::= [a-c]+ | \"<\" [0-9] \">\"", r"([a-c]+|<[0-9]>)(,([a-c]+|<[0-9]>)){0,4}"),
    (r'root ::= [0-9]{4} "-" [0-9]{2} "-" [0-9]{2}', r"[0-9]{4}-[0-9]{2}-[0-9]{2}"),
    (r'root ::= ("ab" | "a") ("bc" | "c")* "."', r"(ab|a)(bc|c)*\."),
    ("root ::= word (\" \" word){1,5} \".\"\nword ::= [a-z]{1,7}", r"[a-z]{1,7}( [a-z]{1,7}){1,5}\."),
    (r'root ::= "0x" [0-9a-f]{2,8}', r"0x[0-9a-f]{2,8}"),
    (r'root ::= "-"? [1-9] [0-9]{0,5} ("." [0-9]{1,3})?', r"-?[1-9][0-9]{0,5}(\.[0-9]{1,3})?"),
    ("root ::= \"(\" inner \")\"\ninner ::= [xy]{0,3} | \"(\" [xy] \")\"", r"\(([xy]{0,3}|\([xy]\))\)"),
    (r'root ::= [^\n"]{1,20} "\n"', r'[^\n"]{1,20}\n'),
    (r'root ::= "<" [a-z]+ ">" [^<]{0,10} "</" [a-z]+ ">"', r"<[a-z]+>[^<]{0,10}</[a-z]+>"),
    (r'root ::= ([A-Z] | [0-9]){8}', r"[A-Z0-9]{8}"),
    (r'root ::= "key=" [a-z_]+ ("&key=" [a-z_]+)?', r"key=[a-z_]+(&key=[a-z_]+)?"),
    ("root ::= line{1,3}\nline ::= \"- \" [a-z ]{1,12} \"\\n\"", r"(- [a-z ]{1,12}\n){1,3}"),
    (r'root ::= "true" | "false" | "null" | [0-9]+', r"true|false|null|[0-9]+"),
    (r'root ::= [\u00e0-\u00ff]{1,4} " " [\u4e00-\u4e10]{1,2}', "[\u00e0-\u00ff]{1,4} [\u4e00-\u4e10]{1,2}"),
    (r'root ::= "SELECT " [a-z]+ (", " [a-z]+)* " FROM " [a-z]+ ";"', r"SELECT [a-z]+(, [a-z]+)* FROM [a-z]+;"),
    (r'root ::= [a-z]+ "@" [a-z]+ "." ("com" | "org" | "net")', r"[a-z]+@[a-z]+\.(com|org|net)"),
    (r'root ::= "[" ([0-9] ("," [0-9])*)? "]"', r"\[([0-9](,[0-9])*)?\]"),
    (r'root ::= ("ha"){2,4} "!"?', r"(ha){2,4}!?"),
]


def check_grammars(port, per_grammar):
    failures, count = [], 0
    for g, regex in GRAMMARS:
        for k in range(per_grammar):
            chat = k % 2 == 0
            stream = (k // 2) % 2 == 1
            body = {"max_tokens": 200, "temperature": 1.0, "seed": k, "grammar": g, "stream": stream}
            if chat:
                body["messages"] = [{"role": "user", "content": "Answer."}]
            else:
                body["prompt"] = "Answer:"
            status, reply = post(port, "/v1/chat/completions" if chat else "/v1/completions", body, stream)
            for text, finish in replies(status, reply, chat, stream):
                count += 1
                # "length" only where the grammar may go on (`[0-9]+`): the text must still match.
                if finish not in ("stop", "length") or not re.fullmatch(regex, text):
                    failures.append(f"grammar {g!r}: finish {finish}, text {text!r} does not match {regex}")
    print(f"structured: {count} grammar replies over {len(GRAMMARS)} grammars (both endpoints, streamed and not): "
          f"{len(failures)} failed")
    return failures


def check_refusals(port):
    failures = []
    cases = [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 3}}}},
         ["response_format.json_schema.schema", "minimum"]),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"oneOf": [{"type": "string"}]}}}},
         ["oneOf", "anyOf"]),
        ({"response_format": {"type": "xml"}}, ["response_format.type", "xml"]),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "stric": True}}}, ["stric"]),
        ({"grammar": "root ::= item"}, ["'grammar'", "item", "never defined"]),
        ({"grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}}, ["send one"]),
        ({"json_schema": {"type": "string", "format": "email"}}, ["'json_schema'", "email"]),
    ]
    for extra, words in cases:
        body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
        body.update(extra)
        status, reply = post(port, "/v1/chat/completions", body)
        message = (reply or {}).get("error", {}).get("message", "")
        if status != 400 or not all(w in message for w in words):
            failures.append(f"refusal {extra}: status {status}, message {message!r}, wanted {words}")
    # json_object: any object, and the reply ends with it.
    status, reply = post(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 600,
                                                        "seed": 3, "response_format": {"type": "json_object"}, "n": 4})
    for text, finish in replies(status, reply, True, False):
        try:
            ok = finish == "stop" and isinstance(json.loads(text), dict)
        except ValueError:
            ok = False
        if not ok:
            failures.append(f"json_object: finish {finish}, text {text[:200]!r}")
    print(f"structured: {len(cases)} refusals and json_object checked")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--per-schema", type=int, default=21)
    ap.add_argument("--per-grammar", type=int, default=25)
    args = ap.parse_args()
    schemas = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "grammar", "schemas.json"),
                             encoding="utf-8"))
    with Serve(args.binary, args.model, ["--parallel", "8", "--ctx-size", "8192"]) as s:
        failures = check_refusals(s.port)
        failures += check_grammars(s.port, args.per_grammar)
        failures += check_schemas(s.port, schemas, args.per_schema, 3)
    for f in failures[:30]:
        print("FAIL " + f)
    if failures:
        return 1
    print("structured: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
