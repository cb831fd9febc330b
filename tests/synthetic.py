"""Tiny synthetic GGUF models built with the ``gguf`` package (for bad-input tests)."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def tiny_llama_gguf(path: Path, *, head_dim: int = 32, n_head: int = 2, n_layer: int = 1, n_vocab: int = 64,
                    n_head_kv: int | None = None, n_embd: int | None = None, seed: int = 0,
                    k_bias: float = 0.0) -> Path:
    """Write a llama-arch GGUF with the given attention shape (f32 random weights, no vocab).

    head_dim: K and V head dim (``llama.attention.key_length``/``value_length``); n_head /
    n_head_kv: query / KV heads (GQA ratio n_head / n_head_kv; n_head_kv defaults to n_head);
    n_embd: model width (default head_dim * n_head; may differ, e.g. to keep a head dim of
    576 with 7 query heads small); k_bias > 0 adds an ``attn_k.bias`` of that standard
    deviation to every layer (a Qwen2-like K bias, for K centering). Enough for llama.cpp to load it, create a context and
    decode (logits are meaningless but finite). head_dim=32 makes every 64-value KV-cache
    block type (turbo*) impossible.
    """
    import gguf

    n_head_kv = n_head if n_head_kv is None else n_head_kv
    n_embd = head_dim * n_head if n_embd is None else n_embd
    n_ff = 2 * n_embd
    n_q, n_kv = head_dim * n_head, head_dim * n_head_kv
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tqgguf-test-tiny")
    w.add_context_length(256)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_tokenizer_model("none")
    w.add_vocab_size(n_vocab)
    rng = np.random.default_rng(seed)

    def t(name, *shape):
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    t("token_embd.weight", n_vocab, n_embd)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    t("output.weight", n_vocab, n_embd)
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        t(f"blk.{i}.attn_q.weight", n_q, n_embd)
        t(f"blk.{i}.attn_k.weight", n_kv, n_embd)
        if k_bias > 0:
            w.add_tensor(f"blk.{i}.attn_k.bias", (rng.standard_normal(n_kv) * k_bias).astype(np.float32))
        t(f"blk.{i}.attn_v.weight", n_kv, n_embd)
        t(f"blk.{i}.attn_output.weight", n_embd, n_q)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        t(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def tiny_mmproj_gguf(path: Path, *, n_embd_text: int, image_size: int = 32, patch_size: int = 8, n_embd: int = 64,
                     n_head: int = 4, n_layer: int = 2, n_ff: int = 96, seed: int = 0) -> Path:
    """Write a LLaVA-style vision projector GGUF (``clip.projector_type`` "mlp": a CLIP ViT
    encoder, then ``mm.0`` -> GELU -> ``mm.2`` into the text model's embedding) with f32
    random weights, as llama.cpp's mtmd (tools/mtmd/clip.cpp) loads it: the keys its
    ``load_hparams`` requires (``clip.vision.*``: embedding_length, head_count,
    feed_forward_length, block_count, projection_dim, attention.layer_norm_epsilon,
    image_size, patch_size, image_mean, image_std; ``clip.has_vision_encoder``) and the
    tensors ``load_tensors`` and the llava graph read (``v.patch_embd``, ``v.position_embd``,
    per block ``ln1``/``ln2``, ``attn_q/k/v/out``, ``ffn_up/down``; ``mm.0``, ``mm.2``).

    n_embd_text: the text model's ``n_embd`` (mtmd refuses a projector whose output width
    differs); an image becomes (image_size / patch_size)**2 embeddings (16 by default), the
    image tokens it adds to a prompt. The llava graph runs blocks 0 .. n_layer-2 (its
    feature layer is the second to last), so n_layer must be at least 2 for any block to
    run. The answers of a model with this projector are meaningless; its path is real.
    """
    import gguf

    rng = np.random.default_rng(seed)
    n_pos = (image_size // patch_size) ** 2
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_name("tqgguf-test-mmproj")
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch_size)
    w.add_uint32("clip.vision.embedding_length", n_embd)
    w.add_uint32("clip.vision.feed_forward_length", n_ff)
    w.add_uint32("clip.vision.projection_dim", n_embd_text)
    w.add_uint32("clip.vision.attention.head_count", n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    w.add_uint32("clip.vision.block_count", n_layer)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    def t(name, *shape, scale=0.02):  # numpy shapes are ggml's ne reversed: (out, in) for a matmul weight
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def ones(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    def zeros(name, n):
        w.add_tensor(name, np.zeros(n, dtype=np.float32))

    t("v.patch_embd.weight", n_embd, 3, patch_size, patch_size)
    zeros("v.patch_embd.bias", n_embd)
    t("v.position_embd.weight", n_pos, n_embd)
    for i in range(n_layer):
        for ln in ("ln1", "ln2"):
            ones(f"v.blk.{i}.{ln}.weight", n_embd)
            zeros(f"v.blk.{i}.{ln}.bias", n_embd)
        for a in ("attn_q", "attn_k", "attn_v", "attn_out"):
            t(f"v.blk.{i}.{a}.weight", n_embd, n_embd)
            zeros(f"v.blk.{i}.{a}.bias", n_embd)
        t(f"v.blk.{i}.ffn_up.weight", n_ff, n_embd)
        zeros(f"v.blk.{i}.ffn_up.bias", n_ff)
        t(f"v.blk.{i}.ffn_down.weight", n_embd, n_ff)
        zeros(f"v.blk.{i}.ffn_down.bias", n_embd)
    t("mm.0.weight", n_embd_text, n_embd)
    zeros("mm.0.bias", n_embd_text)
    t("mm.2.weight", n_embd_text, n_embd_text)
    zeros("mm.2.bias", n_embd_text)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
