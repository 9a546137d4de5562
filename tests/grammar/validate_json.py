#!/usr/bin/env python3
"""Validates generated JSON texts against their schemas with Python's jsonschema (Draft 2020-12,
formats checked): the reference for tests/grammar and the structured-output e2e tests.
    validate_json.py SCHEMAS.json SAMPLES.json
SAMPLES.json: [{"schema": INDEX, "text": "..."}]; prints one line per failure and a summary;
exit 1 when any sample fails to parse or to validate."""
import datetime
import json
import sys

import jsonschema


def main():
    schemas = json.load(open(sys.argv[1], encoding="utf-8"))
    samples = json.load(open(sys.argv[2], encoding="utf-8"))
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    bad = 0
    for s in samples:
        schema = schemas[s["schema"]]["schema"]
        text = s["text"]
        try:
            value = json.loads(text)
            jsonschema.Draft202012Validator(schema, format_checker=checker).validate(value)
            # Formats the installed checker may skip (rfc3339-validator absent): parse them here.
            for key, fmt in (("at", "date-time"), ("t", "time"), ("day", "date")):
                if isinstance(value, dict) and key in value and schemas[s["schema"]]["name"] == "formats":
                    v = value[key]
                    if fmt == "date-time":
                        datetime.datetime.fromisoformat(v.replace("Z", "+00:00"))
                    elif fmt == "time":
                        datetime.time.fromisoformat(v.replace("Z", "+00:00"))
                    else:
                        datetime.date.fromisoformat(v)
        except Exception as e:  # noqa: BLE001 - every failure is reported
            bad += 1
            print(f"FAIL schema {s['schema']} ({schemas[s['schema']]['name']}): {type(e).__name__}: "
                  f"{str(e).splitlines()[0][:200]}\n  text: {text[:300]!r}")
    print(f"validated {len(samples)} samples over {len({s['schema'] for s in samples})} schemas: {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
