#!/usr/bin/python3
"""Checks answers against OpenAI's own description of them (openai-schemas.json, cut from OpenAI's OpenAPI
document by scripts/openapi-subset.py), with Debian's python3-jsonschema (JSON Schema 2020-12).

    validate.py CASES.json
    cases: [{"label", "schema": a $defs name, "instance": the answer, "null_as_sent": ["choices/*/finish_reason"]}]

Prints one line per case and exits 1 if any fails.

One reading is added to JSON Schema's: the document is OpenAPI 3.1 but keeps OpenAPI 3.0's `nullable: true`
on some fields (a stream chunk's finish_reason, logprobs, usage, ...), where OpenAI itself sends null. A
schema marked `nullable: true` therefore takes null, as its authors mean. And where OpenAI's own answers
carry null although the document wants a value (a completions stream chunk's finish_reason before the last,
a Response's usage in response.created), a case lists those paths in "null_as_sent": a null there is
what OpenAI sends, and no other value is let through.
"""
import fnmatch
import json
import os
import sys

from jsonschema import Draft202012Validator, validators


def _nullable(check):
    def keyword(validator, value, instance, schema):
        if instance is None and schema.get("nullable") is True:
            return
        yield from check(validator, value, instance, schema)

    return keyword


Validator = validators.extend(
    Draft202012Validator,
    {key: _nullable(Draft202012Validator.VALIDATORS[key]) for key in ("type", "enum", "$ref", "anyOf", "oneOf", "allOf")},
)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    doc = json.load(open(os.path.join(here, "openai-schemas.json")))
    cases = json.load(open(sys.argv[1]))
    failed = 0
    for case in cases:
        schema = {"$schema": doc["$schema"], "$defs": doc["$defs"], "$ref": "#/$defs/" + case["schema"]}
        as_sent = case.get("null_as_sent", [])

        def forgiven(e):
            path = "/".join(map(str, e.absolute_path))
            return e.instance is None and any(fnmatch.fnmatchcase(path, p) for p in as_sent)

        errors = [e for e in Validator(schema).iter_errors(case["instance"]) if not forgiven(e)]
        errors.sort(key=lambda e: list(e.absolute_path))
        if errors:
            failed += 1
            print(f"FAIL {case['label']} ({case['schema']}):")
            for e in errors[:5]:
                print(f"  at {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:300]}")
        else:
            print(f"ok   {case['label']} ({case['schema']})")
    print(f"{len(cases) - failed} valid, {failed} invalid")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
