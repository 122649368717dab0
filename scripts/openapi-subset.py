#!/usr/bin/env python3
"""Cuts the schemas epd's answers are checked against out of OpenAI's OpenAPI document.

    scripts/openapi-subset.py openapi.json tests/http/openapi/openai-schemas.json [COMMIT]

openapi.json is the file of the public repository openai/openai-openapi (MIT licence). The output holds
the named root schemas and every schema they reference, as one JSON Schema 2020-12 document whose $defs
are the components' schemas (references rewritten from #/components/schemas/X to #/$defs/X), with a note
of where it came from. tests/http/openapi/validate.py reads it.
"""
import json
import sys

ROOTS = [
    "CreateChatCompletionResponse",
    "CreateChatCompletionStreamResponse",
    "CreateCompletionResponse",
    "ListModelsResponse",
    "ErrorResponse",
    "Response",
    "ResponseCreatedEvent",
    "ResponseInProgressEvent",
    "ResponseOutputItemAddedEvent",
    "ResponseOutputItemDoneEvent",
    "ResponseContentPartAddedEvent",
    "ResponseContentPartDoneEvent",
    "ResponseTextDeltaEvent",
    "ResponseTextDoneEvent",
    "ResponseReasoningTextDeltaEvent",
    "ResponseReasoningTextDoneEvent",
    "ResponseFunctionCallArgumentsDeltaEvent",
    "ResponseFunctionCallArgumentsDoneEvent",
    "ResponseCompletedEvent",
    "ResponseIncompleteEvent",
    "ResponseErrorEvent",
]
PREFIX = "#/components/schemas/"


def refs(node, out):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str) and v.startswith(PREFIX):
                out.add(v[len(PREFIX):])
            else:
                refs(v, out)
    elif isinstance(node, list):
        for v in node:
            refs(v, out)


def rewrite(node):
    if isinstance(node, dict):
        return {k: ("#/$defs/" + v[len(PREFIX):] if k == "$ref" and isinstance(v, str) and v.startswith(PREFIX)
                    else rewrite(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [rewrite(v) for v in node]
    return node


def main(src, dst, commit=""):
    doc = json.load(open(src))
    schemas = doc["components"]["schemas"]
    keep, todo = set(), list(ROOTS)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        found = set()
        refs(schemas[name], found)
        todo.extend(found - keep)
    out = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": "Cut by scripts/openapi-subset.py from openapi.json of github.com/openai/openai-openapi "
                    "(MIT licence)" + (" at commit " + commit if commit else "") + ", OpenAPI " + doc["openapi"] + ", API version " + doc["info"]["version"] +
                    ": the schemas " + ", ".join(ROOTS) + " and those they reference.",
        "$defs": {name: rewrite(schemas[name]) for name in sorted(keep)},
    }
    with open(dst, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{len(keep)} schemas of {len(schemas)} written to {dst}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
