#!/usr/bin/env python3
"""One client of the multi-host test: POSTs the same /v1/generate request in a loop, one at a time, and checks
every answer's tokens against the colocated run's. A connection that breaks (its router was killed) counts as
lost; the client then retries that request on --fallback (another router) and stays there, as a real client
would. Runs until --stop-file exists or --max-seconds pass; prints one JSON summary line.

  load_client.py --url URL --body FILE --want TOKENS_JSON --stop-file F [--fallback URL] [--max-seconds N]
"""
import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request


def post(url, body, timeout):
    req = urllib.request.Request(url + "/v1/generate", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:  # an answer: the router said no
        return e.code, None
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, None  # no answer: the connection broke or nothing listens


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--fallback")
    p.add_argument("--body", required=True)
    p.add_argument("--want", required=True)
    p.add_argument("--stop-file", required=True)
    p.add_argument("--max-seconds", type=float, default=120)
    a = p.parse_args()
    body = open(a.body, "rb").read()
    want = json.loads(a.want)
    out = {"ok": 0, "wrong": 0, "errors": {}, "lost": 0, "retried_ok": 0, "retried_failed": 0}
    url = a.url
    deadline = time.monotonic() + a.max_seconds
    while time.monotonic() < deadline and not os.path.exists(a.stop_file):
        status, answer = post(url, body, 30)
        if status == 0 and a.fallback and url != a.fallback:
            out["lost"] += 1
            url = a.fallback
            status, answer = post(url, body, 30)
            key = "retried_ok" if status == 200 and answer.get("tokens") == want else "retried_failed"
            out[key] += 1
            continue
        if status == 200:
            out["ok" if answer.get("tokens") == want else "wrong"] += 1
        else:
            out["errors"][str(status)] = out["errors"].get(str(status), 0) + 1
    print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
