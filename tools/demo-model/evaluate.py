#!/usr/bin/python3
"""Asks the exported demo model held-out questions through llama.cpp itself (build/bin/epd-mtmd-reference:
libllama + libmtmd, greedy) and through epd (build/bin/epd-run --chat), and reports exact-answer accuracy per
question type for each, and whether the two agree token for token.

    /usr/bin/python3 tools/demo-model/evaluate.py [--scenes 100] [--lm out/lm.gguf] [--tag f16]

Held-out scenes are seed 2 (training uses seed 1); each scene gets one question of each type
(scenes.eval_questions), asked with the question first and again with the picture first ("pic+" types), plus
every plain-text turn once. An answer is right when its text (decoded with the
SentencePiece model, up to <|im_end|>) equals the expected answer exactly. Writes out/eval-TAG.json.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scenes  # noqa: E402
from model import Tokens, out_dir  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def user_text(image, question, picture_first):
    """The user turn with llama.cpp's marker where the picture stands."""
    if not image:
        return question
    return "<__media__>" + question if picture_first else question + "<__media__>"


def llama_cpp(bin_dir, lm, mmproj, image, question, n, picture_first=False):
    prompt = "<|im_start|>user\n" + user_text(image, question, picture_first) + \
        "<|im_end|>\n<|im_start|>assistant\n"
    cmd = [os.path.join(bin_dir, "epd-mtmd-reference"), "--model", lm, "--mmproj", mmproj, "--prompt", prompt,
           "-n", str(n), "--threads", "1"]
    if image:
        cmd += ["--image", image]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr[-2000:]}")
    return json.loads(r.stdout)["generated"]


def epd(bin_dir, lm, mmproj, image, question, n, end_id, picture_first=False):
    cmd = [os.path.join(bin_dir, "epd-run"), "--model", lm, "--mmproj", mmproj, "--prompt",
           user_text(image, question, picture_first), "--chat",
           "--max-tokens", str(n), "--threads", "1", "--json"]
    if image:
        cmd += ["--image", image]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr[-2000:]}")
    line = [x for x in r.stdout.splitlines() if x.startswith("{")][-1]
    toks = json.loads(line)["tokens"]
    return toks[:toks.index(end_id)] if end_id in toks else toks  # llama.cpp stops before the end token


def main():
    ap = argparse.ArgumentParser()
    out = out_dir()
    ap.add_argument("--scenes", type=int, default=100)
    ap.add_argument("--lm", default=os.path.join(out, "lm.gguf"))
    ap.add_argument("--mmproj", default=os.path.join(out, "mmproj.gguf"))
    ap.add_argument("--tag", default="f16")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("-n", type=int, default=48)
    ap.add_argument("--no-epd", action="store_true")
    args = ap.parse_args()

    tok = Tokens(os.path.join(out, "tokenizer.model"))
    img_dir = os.path.join(out, "eval-images")
    os.makedirs(img_dir, exist_ok=True)
    cases = []
    for i in range(args.scenes):
        sc = scenes.make_scene(scenes.EVAL_SEED, i)
        path = os.path.join(img_dir, f"scene-{scenes.EVAL_SEED}-{i}.png")
        if not os.path.exists(path):
            scenes.write_png(path, scenes.render(sc))
        for q in scenes.eval_questions(sc):
            cases.append({"scene": i, "image": path, "picture_first": False, **q})
            # The same question with the picture first (LLaVA's order), counted as its own type.
            cases.append({"scene": i, "image": path, "picture_first": True, **q, "type": "pic+" + q["type"]})
    for q, a in scenes.TEXT_TURNS:
        cases.append({"scene": None, "image": None, "picture_first": False, "type": "text", "question": q,
                      "answer": a})

    types = list(scenes.QUESTION_TYPES) + ["pic+" + t for t in scenes.QUESTION_TYPES] + ["text"]
    stats = {t: {"n": 0, "llama_cpp": 0, "epd": 0, "agree": 0} for t in types}
    t0 = time.time()
    for k, c in enumerate(cases):
        ref = llama_cpp(args.bin, args.lm, args.mmproj, c["image"], c["question"], args.n, c["picture_first"])
        c["llama_cpp_tokens"] = ref
        c["llama_cpp_text"] = tok.decode(ref)
        s = stats[c["type"]]
        s["n"] += 1
        s["llama_cpp"] += c["llama_cpp_text"] == c["answer"]
        if not args.no_epd:
            mine = epd(args.bin, args.lm, args.mmproj, c["image"], c["question"], args.n, tok.im_end,
                       c["picture_first"])
            c["epd_tokens"] = mine
            c["epd_text"] = tok.decode(mine)
            s["epd"] += c["epd_text"] == c["answer"]
            s["agree"] += mine == ref
        if (k + 1) % 50 == 0:
            print(f"{k + 1}/{len(cases)} questions, {time.time() - t0:.0f}s", file=sys.stderr, flush=True)

    print(f"{args.tag}: {args.lm}")
    print(f"{'type':13} {'n':>4} {'llama.cpp':>10} {'epd':>8} {'agree':>7}")
    tot = {"n": 0, "llama_cpp": 0, "epd": 0, "agree": 0}
    for t in types:
        s = stats[t]
        for key in tot:
            tot[key] += s[key]
        if s["n"]:
            print(f"{t:13} {s['n']:4} {s['llama_cpp'] / s['n']:10.1%} {s['epd'] / s['n']:8.1%} "
                  f"{s['agree'] / s['n']:7.1%}")
    print(f"{'all':13} {tot['n']:4} {tot['llama_cpp'] / tot['n']:10.1%} {tot['epd'] / tot['n']:8.1%} "
          f"{tot['agree'] / tot['n']:7.1%}")
    wrong = [c for c in cases if c["llama_cpp_text"] != c["answer"]]
    for c in wrong[:12]:
        print(f"  wrong: scene {c['scene']} {user_text(c['image'], c['question'], c['picture_first'])!r}: "
              f"{c['llama_cpp_text']!r} "
              f"(expected {c['answer']!r})")
    with open(os.path.join(out, f"eval-{args.tag}.json"), "w") as f:
        json.dump({"lm": args.lm, "mmproj": args.mmproj, "stats": stats, "cases": cases}, f, indent=1)


if __name__ == "__main__":
    main()
