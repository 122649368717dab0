#!/usr/bin/python3
"""Exports out/checkpoint.pt as llama.cpp files: out/lm.gguf (F16 matrices), out/lm-q8_0.gguf (Q8_0 matrices)
and out/mmproj.gguf (LLaVA-1.5 "mlp" projector, F16 matrices), with gguf-py from the pinned llama.cpp bundle.

    PYTHONPATH=build/_deps/llama.cpp-v0.5.0/gguf-py /usr/bin/python3 tools/demo-model/export.py

Conventions (as tests/model/vision/vision_fixture.cpp writes them, verified to load in libmtmd):
- mmproj: general.architecture "clip", clip.projector_type "mlp", clip.use_gelu false (quick GELU), no
  class embedding, no clip.vision.feature_layer, so llama.cpp runs block_count - 1 blocks: the file holds
  the trained blocks plus one unused block of zeros. Unlike real LLaVA files it has v.post_ln, which
  llama.cpp applies after the last block it runs (the model is trained with it). Norms, biases, the patch
  and position embeddings f32; the blocks' and projector's matrices f16.
- LM: architecture "llama", SentencePiece vocabulary ("llama": tokens, scores, token types) from
  out/tokenizer.model, add_bos_token false, add_space_prefix false, eos = <|im_end|>, ChatML template.
  RoPE is trained on adjacent pairs (llama.cpp's order), so Q/K rows are written as they are.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
BUNDLE_GGUF = os.path.join(HERE, "..", "..", "build", "_deps", "llama.cpp-v0.5.0", "gguf-py")
if os.path.isdir(BUNDLE_GGUF):
    sys.path.insert(0, BUNDLE_GGUF)
import gguf  # noqa: E402
import torch  # noqa: E402

from model import CLIP_MEAN, CLIP_STD, load_checkpoint, out_dir  # noqa: E402

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
          "{% endif %}")


def f32(t):
    return t.detach().float().numpy().astype(np.float32)


def write_mmproj(m, path):
    c = m.c
    v = m.vision
    w = gguf.GGUFWriter(path, "clip")  # general.architecture = "clip"
    w.add_string("general.type", "mmproj")
    w.add_string("general.name", "epd-demo-shapes-mmproj")
    w.add_uint32("general.file_type", 1)
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.use_gelu", False)
    w.add_uint32("clip.vision.image_size", c.image_size)
    w.add_uint32("clip.vision.patch_size", c.patch_size)
    w.add_uint32("clip.vision.embedding_length", c.vision_width)
    w.add_uint32("clip.vision.feed_forward_length", c.vision_ffn)
    w.add_uint32("clip.vision.block_count", c.vision_layers + 1)
    w.add_uint32("clip.vision.attention.head_count", c.vision_heads)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", c.vision_eps)
    w.add_uint32("clip.vision.projection_dim", c.width)
    w.add_array("clip.vision.image_mean", list(CLIP_MEAN))
    w.add_array("clip.vision.image_std", list(CLIP_STD))

    def mat(name, t):  # torch Linear weight [out, in] = ggml ne {in, out}: same bytes
        w.add_tensor(name, f32(t).astype(np.float16))

    def vec(name, t):
        w.add_tensor(name, f32(t))

    w.add_tensor("v.patch_embd.weight", f32(v.patch.weight))  # [d, 3, p, p] = ggml ne {p, p, 3, d}
    w.add_tensor("v.position_embd.weight", f32(v.pos))
    vec("v.pre_ln.weight", v.pre_ln.weight)
    vec("v.pre_ln.bias", v.pre_ln.bias)
    blocks = list(v.blocks)
    for i in range(c.vision_layers + 1):
        b = f"v.blk.{i}."
        blk = blocks[i] if i < len(blocks) else None
        z = (lambda t: torch.zeros_like(t)) if blk is None else (lambda t: t)
        ref = blk or blocks[-1]
        for ln, mod in (("ln1", ref.ln1), ("ln2", ref.ln2)):
            vec(b + ln + ".weight", z(mod.weight))
            vec(b + ln + ".bias", z(mod.bias))
        for name, mod in (("attn_q", ref.q), ("attn_k", ref.k), ("attn_v", ref.v), ("attn_out", ref.o),
                          ("ffn_up", ref.up), ("ffn_down", ref.down)):
            mat(b + name + ".weight", z(mod.weight))
            vec(b + name + ".bias", z(mod.bias))
    vec("v.post_ln.weight", v.post_ln.weight)
    vec("v.post_ln.bias", v.post_ln.bias)
    mat("mm.0.weight", v.mm0.weight)
    vec("mm.0.bias", v.mm0.bias)
    mat("mm.2.weight", v.mm2.weight)
    vec("mm.2.bias", v.mm2.bias)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def vocab(model_file):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model_file)
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(float(sp.get_score(i)))
        if sp.is_unknown(i):
            t = 2
        elif sp.is_control(i):
            t = 3
        elif sp.is_byte(i):
            t = 6
        elif sp.is_unused(i):
            t = 5
        else:
            t = 1
        types.append(t)
    return sp, tokens, scores, types


def write_lm(m, path, model_file, qtype):
    c = m.c
    sp, tokens, scores, types = vocab(model_file)
    assert len(tokens) == c.vocab
    ftype = {"f16": 1, "q8_0": 7}[qtype]
    w = gguf.GGUFWriter(path, "llama")
    w.add_string("general.name", "epd-demo-shapes")
    w.add_uint32("general.file_type", ftype)
    w.add_uint32("llama.context_length", c.context)
    w.add_uint32("llama.embedding_length", c.width)
    w.add_uint32("llama.block_count", c.layers)
    w.add_uint32("llama.feed_forward_length", c.ffn)
    w.add_uint32("llama.attention.head_count", c.heads)
    w.add_uint32("llama.attention.head_count_kv", c.kv_heads)
    w.add_uint32("llama.rope.dimension_count", c.width // c.heads)
    w.add_float32("llama.rope.freq_base", c.rope_theta)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", c.norm_eps)
    w.add_uint32("llama.vocab_size", c.vocab)
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.scores", scores)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_uint32("tokenizer.ggml.unknown_token_id", sp.unk_id())
    w.add_uint32("tokenizer.ggml.bos_token_id", sp.bos_id())
    w.add_uint32("tokenizer.ggml.eos_token_id", sp.piece_to_id("<|im_end|>"))
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.add_bool("tokenizer.ggml.add_eos_token", False)
    w.add_bool("tokenizer.ggml.add_space_prefix", False)
    w.add_string("tokenizer.chat_template", CHATML)

    def mat(name, t):
        a = f32(t)
        if qtype == "q8_0":
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, a.astype(np.float16))

    mat("token_embd.weight", m.embed.weight)
    for i, blk in enumerate(m.blocks):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", f32(blk.attn_norm.weight))
        mat(b + "attn_q.weight", blk.q.weight)
        mat(b + "attn_k.weight", blk.k.weight)
        mat(b + "attn_v.weight", blk.v.weight)
        mat(b + "attn_output.weight", blk.o.weight)
        w.add_tensor(b + "ffn_norm.weight", f32(blk.ffn_norm.weight))
        mat(b + "ffn_gate.weight", blk.gate.weight)
        mat(b + "ffn_up.weight", blk.up.weight)
        mat(b + "ffn_down.weight", blk.down.weight)
    w.add_tensor("output_norm.weight", f32(m.norm.weight))
    mat("output.weight", m.output.weight)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out = out_dir()
    ck = sys.argv[1] if len(sys.argv) > 1 else os.path.join(out, "checkpoint.pt")
    dest = sys.argv[2] if len(sys.argv) > 2 else out
    os.makedirs(dest, exist_ok=True)
    m, info = load_checkpoint(ck)
    m.eval()
    tok = os.path.join(out, "tokenizer.model")
    write_mmproj(m, os.path.join(dest, "mmproj.gguf"))
    write_lm(m, os.path.join(dest, "lm.gguf"), tok, "f16")
    write_lm(m, os.path.join(dest, "lm-q8_0.gguf"), tok, "q8_0")
    for f in ("lm.gguf", "lm-q8_0.gguf", "mmproj.gguf"):
        p = os.path.join(dest, f)
        print(f"{p}: {os.path.getsize(p)} bytes (checkpoint step {info['step']})")


if __name__ == "__main__":
    main()
