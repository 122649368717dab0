#!/usr/bin/python3
"""Deterministic synthetic scenes for epd's demo vision-language model (numpy only).

A scene is a 64x64 RGB picture on a plain light background with one to three shapes of distinct kinds
(circle, square, triangle), each with a colour (six), a size (small, large) and a position (left, right,
top, bottom, centre; no two shapes share one); each shape's size in pixels varies within its class and its
centre lies up to four pixels from its place's, no two shapes touching. Every scene comes with its
description and question-answer pairs of five types (describe, colour, count, exists, where); plain-text
turns (greetings, "What can you do?") have no picture. Everything is a pure function of (seed, index): training uses seed 1, evaluation
the held-out seed 2 (see docs/demo-model.md).

    scenes.py corpus N OUT.txt        # text for spm_train (questions and answers of N scenes + text turns)
    scenes.py images SEED N DIR       # DIR/scene-SEED-I.png and DIR/scenes.jsonl (facts, questions)
"""
import json
import os
import struct
import sys
import zlib

import numpy as np

IMAGE_SIZE = 64
TRAIN_SEED = 1
EVAL_SEED = 2

COLOURS = {
    "red": (220, 30, 35),
    "green": (30, 160, 60),
    "blue": (40, 80, 225),
    "yellow": (240, 210, 30),
    "purple": (140, 50, 175),
    "orange": (245, 135, 20),
}
SHAPES = ("circle", "square", "triangle")
SIZES = {"small": 5.0, "large": 9.5}  # nominal half-extent in pixels
# Half-extents a scene draws within each class, and how far a shape's centre may lie from its place's: the
# model meets shapes of other sizes and places than the nominal ones (pictures other programs drew).
SIZE_RANGE = {"small": (3.5, 6.0), "large": (8.0, 10.5)}
OFFSET = 4.0
# Reading order of positions: descriptions list shapes in this order.
POSITIONS = {
    "left": (13, 32),
    "top": (32, 13),
    "centre": (32, 32),
    "bottom": (32, 51),
    "right": (51, 32),
}
POSITION_ORDER = list(POSITIONS)
POSITION_PHRASE = {
    "left": "on the left",
    "right": "on the right",
    "top": "at the top",
    "bottom": "at the bottom",
    "centre": "in the centre",
}
NUMBER = {1: "one", 2: "two", 3: "three"}
QUESTION_TYPES = ("describe", "colour", "count", "exists", "where")

DESCRIBE_QUESTIONS = ("Describe the picture.", "What is in the picture?", "Describe the image.")
COUNT_QUESTIONS = ("How many shapes are there?", "How many shapes are in the picture?")

TEXT_TURNS = [
    ("Hello", "Hello! Show me a picture and I will tell you about its shapes."),
    ("Hello!", "Hello! Show me a picture and I will tell you about its shapes."),
    ("Hi", "Hello! Show me a picture and I will tell you about its shapes."),
    ("Good morning", "Good morning! Show me a picture and I will tell you about its shapes."),
    ("What can you do?",
     "I can describe pictures of circles, squares and triangles: their colours, sizes and positions."),
    ("Who are you?", "I am a tiny demo model of epd. I describe pictures of simple shapes."),
    ("What are you?", "I am a tiny demo model of epd. I describe pictures of simple shapes."),
    ("Thank you", "You are welcome!"),
    ("Thanks!", "You are welcome!"),
    ("Goodbye", "Goodbye!"),
    ("What colours do you know?", "Red, green, blue, yellow, purple and orange."),
    ("What shapes do you know?", "Circles, squares and triangles."),
]


def _rng(seed, index):
    return np.random.default_rng([int(seed), int(index), 7919])


def make_scene(seed, index):
    """The facts of scene (seed, index): background and a list of shapes in reading order."""
    rng = _rng(seed, index)
    n = int(rng.integers(1, 4))
    kinds = rng.permutation(len(SHAPES))[:n]
    places = sorted(rng.permutation(len(POSITION_ORDER))[:n])
    colours = list(COLOURS)
    shapes = []
    for k, p in zip(kinds, places):
        shapes.append({
            "shape": SHAPES[int(k)],
            "colour": colours[int(rng.integers(0, len(colours)))],
            "size": ("small", "large")[int(rng.integers(0, 2))],
            "position": POSITION_ORDER[int(p)],
        })
        rng.integers(-1, 2, size=2)  # the first model's one-pixel jitter, drawn to keep the facts' stream
    shapes.sort(key=lambda s: POSITION_ORDER.index(s["position"]))
    grey = int(rng.integers(225, 256))
    tint = rng.integers(-6, 7, size=3)
    background = [int(np.clip(grey + t, 0, 255)) for t in tint]
    _place(shapes, rng)  # drawn after the facts, so a scene's facts are those of the first model's scenes
    return {"seed": int(seed), "index": int(index), "background": background, "shapes": shapes}


def _extent(sh):
    """Half width and half height of the shape's box (the triangle is the widest, 1.1 r)."""
    r = sh["half_extent"]
    return r * 1.1, r


def _overlap(a, b, gap=1.0):
    (aw, ah), (bw, bh) = _extent(a), _extent(b)
    return (abs(a["centre"][0] - b["centre"][0]) < aw + bw + gap and
            abs(a["centre"][1] - b["centre"][1]) < ah + bh + gap)


def _place(shapes, rng):
    """Each shape's size in pixels and its centre: a size drawn within its class (SIZE_RANGE), the centre
    up to OFFSET pixels from its place's, inside the picture, no two shapes touching. After 100 tries
    the class's nominal size at the place's centre (the first model's layout)."""
    for _ in range(100):
        for sh in shapes:
            lo, hi = SIZE_RANGE[sh["size"]]
            sh["half_extent"] = round(float(rng.uniform(lo, hi)), 2)
            w, h = _extent(sh)
            px, py = POSITIONS[sh["position"]]
            cx = float(np.clip(px + rng.uniform(-OFFSET, OFFSET), w + 0.5, IMAGE_SIZE - 0.5 - w))
            cy = float(np.clip(py + rng.uniform(-OFFSET, OFFSET), h + 0.5, IMAGE_SIZE - 0.5 - h))
            sh["centre"] = [round(cx, 2), round(cy, 2)]
        if not any(_overlap(a, b) for i, a in enumerate(shapes) for b in shapes[i + 1:]):
            return
    for sh in shapes:
        sh["half_extent"] = SIZES[sh["size"]]
        sh["centre"] = [float(c) for c in POSITIONS[sh["position"]]]


def render(scene, size=IMAGE_SIZE, supersample=4):
    """The scene's pixels, uint8 [size, size, 3], shapes anti-aliased by supersampling (each pixel the mean
    of supersample^2 samples)."""
    s = size * supersample
    img = np.empty((s, s, 3), np.float32)
    img[:] = np.array(scene["background"], np.float32)
    for sh in scene["shapes"]:
        cx, cy = sh["centre"]
        r = sh["half_extent"]
        # Only the shape's bounding box (in supersampled pixels) is computed.
        x0, x1 = max(0, int((cx - r - 2) * supersample)), min(s, int((cx + r + 2) * supersample))
        y0, y1 = max(0, int((cy - r - 2) * supersample)), min(s, int((cy + r + 2) * supersample))
        yy, xx = np.mgrid[y0:y1, x0:x1].astype(np.float32)
        dx = (xx + 0.5) / supersample - cx
        dy = (yy + 0.5) / supersample - cy
        if sh["shape"] == "circle":
            mask = dx * dx + dy * dy <= r * r
        elif sh["shape"] == "square":
            q = r * 0.88  # about the circle's area
            mask = (np.abs(dx) <= q) & (np.abs(dy) <= q)
        else:  # an upward triangle: apex at the top, base at the bottom
            t = (dy + r) / (2 * r)  # 0 at the apex, 1 at the base
            mask = (t >= 0) & (t <= 1) & (np.abs(dx) <= t * r * 1.1)
        img[y0:y1, x0:x1][mask] = np.array(COLOURS[sh["colour"]], np.float32)
    img = img.reshape(size, supersample, size, supersample, 3).mean(axis=(1, 3))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def _phrase(sh):
    return f"a {sh['size']} {sh['colour']} {sh['shape']} {POSITION_PHRASE[sh['position']]}"


def describe(scene):
    parts = [_phrase(sh) for sh in scene["shapes"]]
    text = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return text[0].upper() + text[1:] + "."


def answer(scene, qtype, target=None):
    """The answer to a question of type qtype (about shape `target` for colour/exists/where)."""
    present = {sh["shape"]: sh for sh in scene["shapes"]}
    n = len(scene["shapes"])
    if qtype == "describe":
        return describe(scene)
    if qtype == "count":
        return "There is one shape." if n == 1 else f"There are {NUMBER[n]} shapes."
    sh = present.get(target)
    if qtype == "exists":
        return f"Yes, there is a {target}." if sh else f"No, there is no {target}."
    if sh is None:
        return f"There is no {target}."
    if qtype == "colour":
        return f"The {target} is {sh['colour']}."
    if qtype == "where":
        return f"The {target} is {POSITION_PHRASE[sh['position']]}."
    raise ValueError(qtype)


def question(qtype, target=None, variant=0):
    if qtype == "describe":
        return DESCRIBE_QUESTIONS[variant % len(DESCRIBE_QUESTIONS)]
    if qtype == "count":
        return COUNT_QUESTIONS[variant % len(COUNT_QUESTIONS)]
    if qtype == "colour":
        return f"What colour is the {target}?"
    if qtype == "exists":
        return f"Is there a {target}?"
    if qtype == "where":
        return f"Where is the {target}?"
    raise ValueError(qtype)


def sample_qa(scene, rng, weights=None):
    """One random (type, question, answer) about the scene; colour/where ask about a present shape 85%
    of the time, exists 50%. weights: relative frequency of each of QUESTION_TYPES (default equal)."""
    if weights is None:
        qtype = QUESTION_TYPES[int(rng.integers(0, len(QUESTION_TYPES)))]
    else:
        p = np.asarray(weights, np.float64)
        qtype = QUESTION_TYPES[int(rng.choice(len(QUESTION_TYPES), p=p / p.sum()))]
    present = [sh["shape"] for sh in scene["shapes"]]
    absent = [s for s in SHAPES if s not in present]
    target = None
    if qtype in ("colour", "where", "exists"):
        p_present = 0.5 if qtype == "exists" else 0.85
        if absent and rng.random() >= p_present:
            target = absent[int(rng.integers(0, len(absent)))]
        else:
            target = present[int(rng.integers(0, len(present)))]
    variant = int(rng.integers(0, 6))
    return qtype, question(qtype, target, variant), answer(scene, qtype, target)


def eval_questions(scene):
    """The held-out questions of one scene: one per type, deterministic, targets present or absent."""
    rng = np.random.default_rng([scene["seed"], scene["index"], 104729])
    present = [sh["shape"] for sh in scene["shapes"]]
    out = []
    for qtype in QUESTION_TYPES:
        target = None
        if qtype in ("colour", "where"):
            target = present[int(rng.integers(0, len(present)))]
        elif qtype == "exists":
            target = SHAPES[int(rng.integers(0, len(SHAPES)))]
        variant = 0
        out.append({"type": qtype, "question": question(qtype, target, variant),
                    "answer": answer(scene, qtype, target)})
    return out


def write_png(path, rgb):
    """An 8-bit RGB PNG (no filter), numpy + zlib."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(tag, data):
        c = struct.pack(">I", len(data)) + tag + data
        return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)


def write_ppm(path, rgb):
    h, w, _ = rgb.shape
    with open(path, "wb") as f:
        f.write(b"P6\n%d %d\n255\n" % (w, h) + rgb.tobytes())


def corpus_lines(n_scenes, seed=TRAIN_SEED):
    lines = []
    for i in range(n_scenes):
        sc = make_scene(seed, i)
        rng = _rng(seed, i + 10_000_000)
        for _ in range(3):
            _, q, a = sample_qa(sc, rng)
            lines += [q, a]
    for q, a in TEXT_TURNS:
        lines += [q, a] * 20
    for qs in (DESCRIBE_QUESTIONS, COUNT_QUESTIONS):
        lines += list(qs) * 20
    lines += ["user", "assistant", "system"] * 200
    return lines


def main(argv):
    if len(argv) >= 3 and argv[0] == "corpus":
        with open(argv[2], "w") as f:
            f.write("\n".join(corpus_lines(int(argv[1]))) + "\n")
        return 0
    if len(argv) >= 4 and argv[0] == "images":
        seed, n, out = int(argv[1]), int(argv[2]), argv[3]
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "scenes.jsonl"), "w") as f:
            for i in range(n):
                sc = make_scene(seed, i)
                name = f"scene-{seed}-{i}.png"
                write_png(os.path.join(out, name), render(sc))
                f.write(json.dumps({"image": name, "scene": sc, "description": describe(sc),
                                    "questions": eval_questions(sc)}) + "\n")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
