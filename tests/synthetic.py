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
