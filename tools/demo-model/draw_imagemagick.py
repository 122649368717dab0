#!/usr/bin/python3
"""Draws demo-model scenes with ImageMagick's `convert` instead of scenes.py's renderer, so the model is tested
on pictures another program drew: its own anti-aliasing, at other sizes (libmtmd resizes them to 64 x 64).

    draw_imagemagick.py SEED N DIR [--sizes 64,96,128]

Writes DIR/drawn-SEED-I.png (scene make_scene(SEED, I), size cycling through --sizes) and DIR/scenes.jsonl in
scenes.py's format (image, scene, description, questions). Needs ImageMagick (Debian's `imagemagick`).
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scenes  # noqa: E402


def rgb(c):
    return "rgb(%d,%d,%d)" % tuple(c)


def draw_args(scene, size):
    """convert's arguments drawing the scene at size x size: the same geometry as scenes.render, scaled."""
    k = size / scenes.IMAGE_SIZE
    args = ["-size", f"{size}x{size}", "xc:" + rgb(scene["background"]), "-stroke", "none"]
    for sh in scene["shapes"]:
        cx, cy = sh["centre"][0] * k, sh["centre"][1] * k
        r = sh["half_extent"] * k
        if sh["shape"] == "circle":
            draw = f"circle {cx:.2f},{cy:.2f} {cx + r:.2f},{cy:.2f}"
        elif sh["shape"] == "square":
            q = r * 0.88
            draw = f"rectangle {cx - q:.2f},{cy - q:.2f} {cx + q:.2f},{cy + q:.2f}"
        else:
            w = r * 1.1
            draw = f"polygon {cx:.2f},{cy - r:.2f} {cx + w:.2f},{cy + r:.2f} {cx - w:.2f},{cy + r:.2f}"
        args += ["-fill", rgb(scenes.COLOURS[sh["colour"]]), "-draw", draw]
    return args


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("seed", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("dir")
    ap.add_argument("--sizes", default="64,96,128")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    os.makedirs(a.dir, exist_ok=True)
    with open(os.path.join(a.dir, "scenes.jsonl"), "w") as f:
        for i in range(a.n):
            sc = scenes.make_scene(a.seed, i)
            name = f"drawn-{a.seed}-{i}.png"
            # PNG24: 8-bit RGB whatever colours the picture has (ImageMagick would pick a palette otherwise).
            subprocess.run(["convert", *draw_args(sc, sizes[i % len(sizes)]), "PNG24:" +
                            os.path.join(a.dir, name)], check=True)
            f.write(json.dumps({"image": name, "scene": sc, "description": scenes.describe(sc),
                                "questions": scenes.eval_questions(sc)}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
