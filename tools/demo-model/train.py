#!/usr/bin/python3
"""Trains the demo model from scratch on synthetic scenes (scenes.py), CPU, deterministic from --seed.

    nice -n 19 /usr/bin/python3 train.py [--steps N] [--batch B] [--threads 1] [--max-minutes M] [--resume]

Reads out/tokenizer.model (spm_train, see retrain); writes out/checkpoint.pt every --save-every steps and at
the end, and logs to out/train.log: loss (mean cross-entropy over answer tokens only) and, every
--eval-every steps, teacher-forced exact-answer rates per question type on held-out scenes (seed 2).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scenes  # noqa: E402
from model import Config, DemoVLM, Tokens, out_dir  # noqa: E402

TEXT_FRACTION = 0.04
# Turns with the picture before the question (LLaVA's own order, and many clients'); the rest put the
# question first (OpenAI's examples). The first model knew only the question first and answered the other
# order with broken text.
PICTURE_FIRST = 0.5
# Auxiliary loss (training only, not exported), in place of a pretrained CLIP: a linear head on the vision
# tower's output (all patches) classifies what stands at each of the five positions: nothing, or
# shape x colour x size. Without it the tower collapsed to an image-independent output within 250 steps.
N_FACTS = 1 + len(scenes.SHAPES) * len(scenes.COLOURS) * len(scenes.SIZES)
# A second auxiliary head, shared by every patch, says what stands nearest that patch (nothing, or the fact)
# and at which position. The global head above only asks that the facts be somewhere in the 16 rows, coded
# differently per row; the language model reads rows through attention, one shared value projection for
# all of them, so facts coded the same way in every row near their shape are what it can bind ("the
# triangle" -> its colour). Added after the first model plateaued at 71 % colour / 68 % where.
N_POS = 1 + len(scenes.POSITION_ORDER)
NEAR_PX = 12.0
# A third head, shared by every patch too, says for each kind of shape what the whole scene holds of it
# (absent, or colour x position x size): every row carries the scene's summary in the same code, so a
# question about "the circle" needs no search for the circle's rows, only a choice among three codes.
# Added when both orders were trained: with the picture first, the rows are computed before the question,
# and colour, existence and position questions stalled at 55-83 % in both orders without it
# (out/train-attempt3.log).
N_KIND = 1 + len(scenes.COLOURS) * len(scenes.POSITION_ORDER) * len(scenes.SIZES)


def patch_labels(scene, image_size=scenes.IMAGE_SIZE, patch=16):
    """Per patch (row-major): (fact index, position index) of the shape whose centre is nearest the patch
    centre, if within NEAR_PX, else (0, 0)."""
    facts = fact_labels(scene)
    cols = image_size // patch
    out_f, out_p = [], []
    for i in range(cols * cols):
        px, py = (i % cols + 0.5) * patch, (i // cols + 0.5) * patch
        best, f, pos = NEAR_PX, 0, 0
        for sh in scene["shapes"]:
            k = scenes.POSITION_ORDER.index(sh["position"])
            cx, cy = sh["centre"]
            d = ((px - cx) ** 2 + (py - cy) ** 2) ** 0.5
            if d < best:
                best, f, pos = d, facts[k], 1 + k
        out_f.append(f)
        out_p.append(pos)
    return out_f, out_p


def fact_labels(scene):
    lab = [0] * len(scenes.POSITION_ORDER)
    for sh in scene["shapes"]:
        k = (scenes.SHAPES.index(sh["shape"]) * len(scenes.COLOURS) + list(scenes.COLOURS).index(sh["colour"])) \
            * len(scenes.SIZES) + list(scenes.SIZES).index(sh["size"])
        lab[scenes.POSITION_ORDER.index(sh["position"])] = 1 + k
    return lab


def kind_labels(scene):
    """Per kind of shape (scenes.SHAPES order): 0 when the scene has none, else 1 + its facts' index."""
    lab = [0] * len(scenes.SHAPES)
    for sh in scene["shapes"]:
        k = (list(scenes.COLOURS).index(sh["colour"]) * len(scenes.POSITION_ORDER) +
             scenes.POSITION_ORDER.index(sh["position"])) * len(scenes.SIZES) + list(scenes.SIZES).index(sh["size"])
        lab[scenes.SHAPES.index(sh["shape"])] = 1 + k
    return lab


def render_pool(seed, n, path):
    """The training scenes' pictures, cached in `path` (kept while seed, count and the first scene agree)."""
    first = json.dumps(scenes.make_scene(seed, 0), sort_keys=True)
    if os.path.exists(path):
        d = np.load(path)
        if d["images"].shape[0] == n and int(d["seed"]) == seed and "first" in d and str(d["first"]) == first:
            return d["images"]
    imgs = np.stack([scenes.render(scenes.make_scene(seed, i)) for i in range(n)])
    np.savez(path, images=imgs, seed=seed, first=first)
    return imgs


class Batcher:
    def __init__(self, tok, pool, seed, n_patches, mix=None):
        self.tok, self.pool, self.n_patches, self.mix = tok, pool, n_patches, mix
        self.scenes = [scenes.make_scene(seed, i) for i in range(len(pool))]
        self.prefix = tok.user_prefix()

    def example(self, rng, scene_index=None, qa=None, picture_first=None):
        """(ids, loss mask, scene index or None, index of the first image row)."""
        at = 0
        if scene_index is None and rng.random() < TEXT_FRACTION:
            q, a = scenes.TEXT_TURNS[int(rng.integers(0, len(scenes.TEXT_TURNS)))]
            head = self.prefix + self.tok.user_suffix(q)
            idx = None
        else:
            idx = int(rng.integers(0, len(self.scenes))) if scene_index is None else scene_index
            _, q, a = qa if qa else scenes.sample_qa(self.scenes[idx], rng, self.mix)
            if picture_first is None:
                picture_first = bool(rng.random() < PICTURE_FIRST)
            head, at = self.tok.picture_turn(q, self.n_patches, picture_first)
        ans = self.tok.encode(a) + [self.tok.im_end]
        return head + ans, [0] * len(head) + [1] * len(ans), idx, at

    def collate(self, examples):
        t = max(len(e[0]) for e in examples)
        ids = torch.zeros(len(examples), t, dtype=torch.long)
        mask = torch.zeros(len(examples), t)
        rows, imgs, facts, pfacts, ppos, kinds, self.image_at = [], [], [], [], [], [], []
        for r, (seq, m, idx, at) in enumerate(examples):
            ids[r, :len(seq)] = torch.tensor(seq)
            mask[r, :len(m)] = torch.tensor(m, dtype=torch.float32)
            if idx is not None:
                rows.append(r)
                self.image_at.append(at)
                imgs.append(self.pool[idx])
                facts.append(fact_labels(self.scenes[idx]))
                kinds.append(kind_labels(self.scenes[idx]))
                f, p = patch_labels(self.scenes[idx], patch=int(round((self.n_patches ** -0.5) * scenes.IMAGE_SIZE)))
                pfacts.append(f)
                ppos.append(p)
        images = torch.from_numpy(np.stack(imgs)) if imgs else None
        self.facts = torch.tensor(facts, dtype=torch.long).view(-1, len(scenes.POSITION_ORDER))
        self.patch_facts = torch.tensor(pfacts, dtype=torch.long).view(-1)
        self.patch_pos = torch.tensor(ppos, dtype=torch.long).view(-1)
        self.kinds = torch.tensor(kinds, dtype=torch.long).view(-1, len(scenes.SHAPES))
        return ids, mask, images, torch.tensor(rows, dtype=torch.long)

    def batch(self, rng, size):
        return self.collate([self.example(rng) for _ in range(size)])


def loss_of(model, ids, mask, images, rows, image_at):
    logits = model(ids, images, rows, image_at)
    lp = logits[:, :-1]
    tgt = ids[:, 1:]
    m = mask[:, 1:]
    ce = F.cross_entropy(lp.reshape(-1, lp.shape[-1]), tgt.reshape(-1), reduction="none").view_as(m)
    return (ce * m).sum() / m.sum(), lp, tgt, m


@torch.no_grad()
def held_out(model, tok, n_scenes, n_patches):
    """Teacher-forced exact-answer rate per question type on held-out scenes (seed 2), the question first
    and (types prefixed "pf-") the picture first."""
    pool = np.stack([scenes.render(scenes.make_scene(scenes.EVAL_SEED, i)) for i in range(n_scenes)])
    b = Batcher(tok, pool, scenes.EVAL_SEED, n_patches)
    model.eval()
    right = {pre + t: 0 for pre in ("", "pf-") for t in scenes.QUESTION_TYPES}
    total = dict(right)
    rng = np.random.default_rng(0)
    for i in range(n_scenes):
        exs, types = [], []
        for pre in ("", "pf-"):
            for q in scenes.eval_questions(b.scenes[i]):
                exs.append(b.example(rng, i, (q["type"], q["question"], q["answer"]), picture_first=bool(pre)))
                types.append(pre + q["type"])
        ids, mask, images, rows = b.collate(exs)
        _, lp, tgt, m = loss_of(model, ids, mask, images, rows, b.image_at)
        ok = ((lp.argmax(-1) == tgt) | (m == 0)).all(-1)
        for t, o in zip(types, ok.tolist()):
            right[t] += o
            total[t] += 1
    model.train()
    return {t: right[t] / total[t] for t in right}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads; 2 spin-wait badly on a busy 2-core machine (9x slower measured)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--pool", type=int, default=20000, help="training scenes rendered once (seed 1)")
    ap.add_argument("--save-every", type=int, default=250)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--eval-scenes", type=int, default=60)
    ap.add_argument("--max-minutes", type=float, default=0, help="stop (and save) after this wall time")
    ap.add_argument("--stop-at", type=int, default=0, help="stop (and save) at this step, schedule unchanged")
    ap.add_argument("--aux-weight", type=float, default=0.5)
    ap.add_argument("--patch-aux-weight", type=float, default=0.5)
    ap.add_argument("--kind-aux-weight", type=float, default=0.5)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--mix", default="",
                    help="relative frequency of question types, e.g. describe=1,colour=2,count=0.5,exists=1,where=2")
    ap.add_argument("--lm", default="", help="language-model shape, e.g. width=192,layers=6,heads=6,ffn=512")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = out_dir()
    os.makedirs(out, exist_ok=True)
    log = open(os.path.join(out, "train.log"), "a")

    def say(msg):
        print(msg, flush=True)
        log.write(msg + "\n")
        log.flush()

    tok = Tokens(os.path.join(out, "tokenizer.model"))
    c = Config(vocab=tok.sp.get_piece_size(),
               **{k: int(v) for k, v in (kv.split("=") for kv in args.lm.split(",") if kv)})
    model = DemoVLM(c)
    model.aux = torch.nn.Linear(c.n_patches * c.vision_width, len(scenes.POSITION_ORDER) * N_FACTS)
    model.patch_aux = torch.nn.Linear(c.vision_width, N_FACTS + N_POS)
    model.kind_aux = torch.nn.Linear(c.vision_width, len(scenes.SHAPES) * N_KIND)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    step = 0
    ck_path = os.path.join(out, "checkpoint.pt")
    if args.resume and os.path.exists(ck_path):
        ck = torch.load(ck_path, map_location="cpu")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step = ck["step"]
        say(f"resumed at step {step}")
    n_params = sum(p.numel() for p in model.parameters())
    say(f"config {json.dumps(c.to_dict())} params {n_params}")

    t0 = time.time()
    pool = render_pool(scenes.TRAIN_SEED, args.pool, os.path.join(out, "train_pool.npz"))
    say(f"pool of {len(pool)} scenes in {time.time() - t0:.1f}s")
    mix = None
    if args.mix:
        given = dict((k, float(v)) for k, v in (kv.split("=") for kv in args.mix.split(",")))
        mix = [given.get(t, 1.0) for t in scenes.QUESTION_TYPES]
    batcher = Batcher(tok, pool, scenes.TRAIN_SEED, c.n_patches, mix)

    def save():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "config": c.to_dict(), "args": vars(args)}, ck_path + ".tmp")
        os.replace(ck_path + ".tmp", ck_path)

    t0 = time.time()
    ema = None
    while step < args.steps:
        rng = np.random.default_rng([args.seed, step])
        lr = args.lr * min(1.0, (step + 1) / args.warmup)
        lr *= 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / args.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        ids, mask, images, rows = batcher.batch(rng, args.batch)
        loss, *_ = loss_of(model, ids, mask, images, rows, batcher.image_at)
        aux = paux = kaux = torch.tensor(0.0)
        if images is not None:
            t = model.vision.tower_out
            logits = model.aux(t.reshape(t.shape[0], -1)).view(-1, N_FACTS)
            aux = F.cross_entropy(logits, batcher.facts.view(-1))
            if args.patch_aux_weight:
                pl = model.patch_aux(t.reshape(-1, t.shape[-1]))
                paux = (F.cross_entropy(pl[:, :N_FACTS], batcher.patch_facts) +
                        F.cross_entropy(pl[:, N_FACTS:], batcher.patch_pos))
            if args.kind_aux_weight:  # every row: the scene's summary per kind
                kl = model.kind_aux(t).view(-1, N_KIND)
                kaux = F.cross_entropy(kl, batcher.kinds.unsqueeze(1).expand(-1, t.shape[1], -1).reshape(-1))
        loss_all = loss + args.aux_weight * aux + args.patch_aux_weight * paux + args.kind_aux_weight * kaux
        opt.zero_grad(set_to_none=True)
        loss_all.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        elapsed = time.time() - t0
        if step % 25 == 0:
            say(f"step {step} loss {loss.item():.4f} ema {ema:.4f} aux {aux.item():.4f} patch-aux {paux.item():.4f} kind-aux {kaux.item():.4f} lr {lr:.2e} "
                f"{elapsed / 60:.1f} min")
        if step % args.save_every == 0:
            save()
        if step % args.eval_every == 0 or step == args.steps:
            acc = held_out(model, tok, args.eval_scenes, c.n_patches)
            say(f"step {step} held-out teacher-forced exact answers: " +
                " ".join(f"{k} {v:.2f}" for k, v in acc.items()))
        if args.stop_at and step >= args.stop_at:
            say(f"stopping at step {step} (--stop-at)")
            break
        if args.max_minutes and elapsed > args.max_minutes * 60:
            say(f"stopping at step {step}: {args.max_minutes} minutes")
            break
    save()
    say(f"done: step {step}, {(time.time() - t0) / 60:.1f} min, final ema loss {ema:.4f}")


if __name__ == "__main__":
    main()
