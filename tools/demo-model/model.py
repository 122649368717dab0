"""The demo model in PyTorch: a LLaVA-1.5-shaped vision-language model, tiny.

Every operation mirrors what llama.cpp v0.5.0 computes from the exported files (tools/mtmd/models/llava.cpp,
src/models/llama.cpp), so export.py only renames and converts tensors:

  vision (CLIP ViT, projector "mlp"): pixels / 255, (x - mean) / std per channel; Conv2d patch embedding
    without bias; learned positions (no class embedding); pre-LayerNorm; `vision_layers` pre-LN blocks
    (LayerNorm -> MHA with biases -> residual; LayerNorm -> Linear -> quick GELU -> Linear -> residual); a
    post-LayerNorm (llama.cpp applies v.post_ln whenever the file has it: without it the un-normalised residual
    stream grew to norms ~3000, image-independent, and the tower stopped learning); projector Linear -> GELU (tanh form, ggml_gelu) -> Linear to the LM's width.
    llama.cpp runs block_count - 1 blocks of an mmproj without clip.vision.feature_layer (LLaVA's
    second-to-last layer): the exported file carries one more, unused, block.
  language model (Llama): token embeddings; RMSNorm -> GQA attention with RoPE on ADJACENT pairs (2i, 2i+1),
    llama.cpp's rope type "norm", so Q/K rows are exported as they are, without the HF permutation ->
    residual; RMSNorm -> SwiGLU -> residual; final RMSNorm; untied output head.
"""
import math
import os
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F

import scenes

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass
class Config:
    image_size: int = scenes.IMAGE_SIZE
    patch_size: int = 16
    vision_width: int = 96
    vision_heads: int = 4
    vision_ffn: int = 256  # != vision_width (llama.cpp swaps up/down of old files when equal)
    vision_layers: int = 3  # blocks llama.cpp runs; the mmproj holds vision_layers + 1
    vision_eps: float = 1e-5
    vocab: int = 512
    width: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 352
    context: int = 256
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def n_patches(self):
        return (self.image_size // self.patch_size) ** 2

    def to_dict(self):
        return asdict(self)


# --------------------------------------------------------------------------------------------- tokens


class Tokens:
    """The SentencePiece model and the prompt layout llama.cpp's mtmd_tokenize produces for
    "<|im_start|>user\\n<__media__>QUESTION<|im_end|>\\n<|im_start|>assistant\\n" (no BOS, no space prefix:
    the GGUF says add_bos_token = false, add_space_prefix = false)."""

    def __init__(self, model_file):
        import sentencepiece as spm

        self.sp = spm.SentencePieceProcessor(model_file=model_file)
        self.im_start = self.sp.piece_to_id("<|im_start|>")
        self.im_end = self.sp.piece_to_id("<|im_end|>")
        assert self.sp.is_control(self.im_start) and self.sp.is_control(self.im_end)
        self._cache = {}

    def encode(self, text):
        ids = self._cache.get(text)
        if ids is None:
            ids = self.sp.encode(text)
            self._cache[text] = ids
        return list(ids)

    def user_prefix(self):
        return [self.im_start] + self.encode("user\n")

    def picture_turn(self, question, n_image, picture_first=False):
        """The user turn with the question before the picture, as OpenAI's clients send the parts
        ([text, image_url]) and llama-server joins them: "<|im_start|>user\nQUESTION<__media__><|im_end|>\n
        <|im_start|>assistant\n"; or (picture_first) the picture first, as LLaVA's own prompts have it:
        "<|im_start|>user\n<__media__>QUESTION<|im_end|>...". mtmd tokenizes the text on each side of the
        picture as one piece. -> (ids with n_image placeholder zeros, index of the first image row)."""
        if picture_first:
            head = self.user_prefix()
            return head + [0] * n_image + self.user_suffix(question), len(head)
        head = [self.im_start] + self.encode("user\n" + question)
        tail = [self.im_end] + self.encode("\n") + [self.im_start] + self.encode("assistant\n")
        return head + [0] * n_image + tail, len(head)

    def user_suffix(self, question):
        return self.encode(question) + [self.im_end] + self.encode("\n") + [self.im_start] + \
            self.encode("assistant\n")

    def decode(self, ids):
        out = []
        for i in ids:
            if i == self.im_end:
                break
            out.append(i)
        return self.sp.decode(out)


# --------------------------------------------------------------------------------------------- vision


def quick_gelu(x):
    return x * torch.sigmoid(1.702 * x)


class VisionBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c.vision_width
        self.heads = c.vision_heads
        self.ln1 = nn.LayerNorm(d, eps=c.vision_eps)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=c.vision_eps)
        self.up = nn.Linear(d, c.vision_ffn)
        self.down = nn.Linear(c.vision_ffn, d)

    def forward(self, x):
        b, n, d = x.shape
        hd = d // self.heads
        h = self.ln1(x)
        q = self.q(h).view(b, n, self.heads, hd).transpose(1, 2)
        k = self.k(h).view(b, n, self.heads, hd).transpose(1, 2)
        v = self.v(h).view(b, n, self.heads, hd).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1)
        x = x + self.o((att @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.down(quick_gelu(self.up(self.ln2(x))))


class Vision(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.patch = nn.Conv2d(3, c.vision_width, c.patch_size, stride=c.patch_size, bias=False)
        self.pos = nn.Parameter(torch.randn(c.n_patches, c.vision_width) * 0.02)
        self.pre_ln = nn.LayerNorm(c.vision_width, eps=c.vision_eps)
        self.blocks = nn.ModuleList(VisionBlock(c) for _ in range(c.vision_layers))
        self.post_ln = nn.LayerNorm(c.vision_width, eps=c.vision_eps)
        self.mm0 = nn.Linear(c.vision_width, c.width)
        self.mm2 = nn.Linear(c.width, c.width)
        self.register_buffer("mean", torch.tensor(CLIP_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(CLIP_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, pixels_u8):
        """pixels_u8: uint8 [B, H, W, 3] -> [B, n_patches, width]."""
        x = pixels_u8.permute(0, 3, 1, 2).float() / 255.0
        x = (x - self.mean) / self.std
        x = self.patch(x).flatten(2).transpose(1, 2)  # [B, n, d], patch index = row * cols + col
        x = self.pre_ln(x + self.pos)
        for blk in self.blocks:
            x = blk(x)
        x = self.post_ln(x)
        self.tower_out = x  # for train.py's auxiliary scene-facts head (not exported)
        return self.mm2(F.gelu(self.mm0(x), approximate="tanh"))


# --------------------------------------------------------------------------------------------- language model


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, cos, sin):
    """x [B, H, T, hd]; rotates adjacent pairs (2i, 2i+1) (llama.cpp's LLAMA_ROPE_TYPE_NORM)."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    r0 = x0 * cos - x1 * sin
    r1 = x0 * sin + x1 * cos
    return torch.stack((r0, r1), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, hd = c.width, c.width // c.heads
        self.heads, self.kv_heads, self.hd = c.heads, c.kv_heads, hd
        self.attn_norm = RMSNorm(d, c.norm_eps)
        self.q = nn.Linear(d, c.heads * hd, bias=False)
        self.k = nn.Linear(d, c.kv_heads * hd, bias=False)
        self.v = nn.Linear(d, c.kv_heads * hd, bias=False)
        self.o = nn.Linear(c.heads * hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, c.norm_eps)
        self.gate = nn.Linear(d, c.ffn, bias=False)
        self.up = nn.Linear(d, c.ffn, bias=False)
        self.down = nn.Linear(c.ffn, d, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, d = x.shape
        h = self.attn_norm(x)
        q = rope(self.q(h).view(b, t, self.heads, self.hd).transpose(1, 2), cos, sin)
        k = rope(self.k(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2), cos, sin)
        v = self.v(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        rep = self.heads // self.kv_heads  # q head i uses kv head i // rep, as llama.cpp's broadcast
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd) + mask
        x = x + self.o((torch.softmax(att, -1) @ v).transpose(1, 2).reshape(b, t, -1))
        h = self.ffn_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class DemoVLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.vision = Vision(c)
        self.embed = nn.Embedding(c.vocab, c.width)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.width, c.norm_eps)
        self.output = nn.Linear(c.width, c.vocab, bias=False)
        hd = c.width // c.heads
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.arange(c.context).float()[:, None] * inv[None, :]
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)
        self._init()

    def _init(self):
        for name, p in self.named_parameters():
            if p.dim() >= 2 and name != "vision.pos":
                std = 0.02
                if name.endswith(("o.weight", "down.weight")):
                    std = 0.02 / math.sqrt(2 * max(self.c.layers, self.c.vision_layers))
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        nn.init.normal_(self.vision.patch.weight, 0.0, 0.05)

    def forward(self, ids, images=None, image_rows=None, image_at=0):
        """ids [B, T] (image slots hold any id); images uint8 [N, H, W, 3] for rows image_rows of the batch,
        whose n_patches embeddings replace positions image_at .. image_at + n_patches (image_at: one int, or
        one per image row). -> logits [B, T, V]."""
        x = self.embed(ids)
        if images is not None and len(image_rows):
            feats = self.vision(images)
            x = x.clone()
            if isinstance(image_at, int):
                x[image_rows, image_at:image_at + feats.shape[1]] = feats
            else:  # one offset per image row
                for k, (r, at) in enumerate(zip(image_rows.tolist(), image_at)):
                    x[r, at:at + feats.shape[1]] = feats[k]
        t = ids.shape[1]
        mask = torch.full((t, t), float("-inf")).triu(1)
        cos, sin = self.cos[:t], self.sin[:t]
        for blk in self.blocks:
            x = blk(x, cos, sin, mask)
        return self.output(self.norm(x))


def load_checkpoint(path):
    ck = torch.load(path, map_location="cpu")
    c = Config(**ck["config"])
    m = DemoVLM(c)
    m.load_state_dict({k: v for k, v in ck["model"].items() if not k.startswith(("aux.", "patch_aux.", "kind_aux."))})
    return m, ck


def out_dir():
    return os.environ.get("DEMO_MODEL_OUT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "out"))
