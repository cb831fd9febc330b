// tqgguf: K centering for the KV cache.
//
// Every key stored in the cache becomes k - m_l, where m_l is one fixed vector per layer
// (n_embd_k_gqa floats: head_dim values for each KV head). For any query q all logits of
// a layer then move by the same amount q·m_l, and softmax(x - c) = softmax(x), so
// attention is exactly unchanged; a quantized K cache no longer spends its per-block range
// on a large constant component (Qwen2-family K bias: norm ~300 against ~10 for the
// token-dependent part; see docs/K_CENTERING.md in tqgguf).
//
// Selected with the environment variable LLAMA_K_CENTER, read when the KV cache is created
// (like upstream's LLAMA_ATTN_ROT_DISABLE):
//   unset, "", "0", "off"   no centering
//   "bias"                  m_l = the components of blk.N.attn_k.bias in RoPE pairs whose
//                           period 2*pi/theta_i exceeds the model's training context
//                           (n_ctx_train), plus every head dim RoPE does not rotate
//   "bias:N"                the same with a threshold of N tokens
//   "file:PATH"             m_l read from a GGUF holding one F32 tensor "blk.N.k_center"
//                           of n_embd_k_gqa values per layer (post-RoPE, unrotated frame),
//                           e.g. a per-KV-head mean of calibration keys (tqgguf writes it)
//   "full"                  not a fixed vector: the whole K bias, as RoPE turns it at each
//                           position. The cache stores k_s - R(s)·b (= R(s)·W x_s, the
//                           token-dependent part only) and attention adds R(s)·b back for
//                           every cell from the cells' positions (llama-graph.cpp
//                           build_attn), so the keys attention sees are the model's own.
//                           Costs one F32 copy of the layer's K view per ubatch.
//
// Fixed vectors: the cache stores k - m_l; the K-shift adds m_l back before re-applying
// RoPE and subtracts it after, so shifted keys stay centered on the same vector. Full: the
// cache holds R(s)·W x_s, which the K-shift rotates like any key.

#pragma once

#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-cpp.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

struct llama_model;
struct llama_hparams;

// LLAMA_K_CENTER, parsed
struct llama_k_center_config {
    enum class mode { off, bias, file, full };

    mode        kind = mode::off;
    uint32_t    ctx  = 0;  // bias: period threshold in tokens (0 = n_ctx_train)
    std::string path;      // file: GGUF with blk.N.k_center tensors

    // parse LLAMA_K_CENTER (nullptr = unset); throws std::runtime_error naming the value
    // and the accepted forms
    static llama_k_center_config parse(const char * value);
};

// the centering vector of one cache layer, in the two frames the graph needs
struct llama_k_center_layer {
    ggml_tensor * store = nullptr; // F32 [n_embd_k_gqa]: subtracted from K at cache write
                                   // (Hadamard-rotated per block when the cache rotates K)
    ggml_tensor * rope  = nullptr; // F32 [n_rot, n_head_kv]: added/subtracted around the
                                   // K-shift RoPE (unrotated frame, rotated dims only)
};

using llama_k_center_bufs = std::vector<std::pair<ggml_context_ptr, ggml_backend_buffer_ptr>>;

// what a KV cache subtracts from its keys
struct llama_k_center_state {
    std::map<uint32_t, llama_k_center_layer> fixed;     // bias / file: layer id -> m_l
    std::map<uint32_t, ggml_tensor *>        full_bias; // full: layer id -> the model's attn_k.bias (F32)
    // full, the add-back without a RoPE per layer: R(pos)·b = bA ⊙ R(pos)·uA + bB ⊙ R(pos)·uB per dim,
    // where uA / uB hold 1 at the first / second dim of each RoPE pair (and uA 1 on the unrotated
    // dims) and bA / bB the bias value at that pair's first / second dim. R(pos)·u is the same for
    // every layer, so the graph ropes it once per ubatch over the cells (sin/cos once per cell, not
    // once per cell and layer) and each layer multiplies and adds. Built when every full layer has
    // the same head dim, K/V heads and n_rot (else empty: the graph ropes each layer's bias).
    std::map<uint32_t, ggml_tensor *>        full_pair; // full: layer id -> F32 [head_dim, n_head_kv, 2]: bA, bB;
                                                         // with full_fold [head_dim, n_head_kv, 4]: slice 2 the
                                                         // partner's coefficient s, slice 3 the partner's dim (M, below)
    ggml_tensor *                            full_unit = nullptr; // full: F32 [head_dim, n_head_kv, 2]: uA, uB
    // full, decode on the CPU: instead of adding R(pos)·b to every cell of K (a cast of K to F32, the
    // add, the Hadamard rotation of R(pos)·b per cell and layer), attention gets q·R(pos)·b as a
    // per-head term of its mask (q·H·(k - R·b) + q·H·H·R·b: H is orthonormal, so the second term is
    // the unrotated q against R(pos)·b), and K stays the cache's. True when full_pair is built,
    // every layer runs on the CPU device with its K cache in host memory (ggml's CPU flash attention
    // reads a mask per head; the GPU kernels read one row for all heads) and LLAMA_K_CENTER_FOLD is
    // not 0; the graph uses it for ubatches of <= 4 tokens. The term per cell is c · R(pos)·uA with
    // c = M q per head: R(pos)·uA holds (cos, sin) of each pair's angle (1 on unrotated dims), and
    // q·R(pos)·b = Σ_pairs cos·(q_f b_f + q_s b_s) + sin·(q_s b_f - q_f b_s) + Σ_unrotated q_j b_j,
    // so M has b_f, b_s in row f and b_f, -b_s in row s: one head_dim-long contraction per cell
    // instead of 2·head_dim over [R·uA ; R·uB], and half the table. M has two entries per row, kept as
    // c_j = bA_j q_j + s_j q_(partner j): s = b_s on a first dim f (partner s), -b_s on a second dim s
    // (partner f), 0 on an unrotated dim (partner itself).
    bool                                     full_fold = false;
    // what the cache's keys have subtracted, for state files (llama-tq-checks.h): "none"
    // (off, or nothing to subtract), else the mode and a 64-bit FNV-1a hash of the layer ids
    // and the unrotated vectors (bias, file) or of the biases (full), e.g. "bias 1f0c…"
    std::string identity = "none";
};

// Build the centering tensors of a KV cache's layers, as LLAMA_K_CENTER asks.
//
//   layer_ids  model layer indices held by the cache
//   n_stream   the cache's streams (full mode needs 1)
//   buft_of    buffer type of a layer's K cache (the vectors live beside it)
//   hadamard   the cache's K rotation matrix (n_hadamard x n_hadamard, row-major) or nullptr
//   bufs       receives the backend buffers (kept apart from the cache's own buffers so a
//              cache clear does not zero them)
//
// Returns the state (empty when centering is off or nothing is to be removed).
// Logs one line saying whether centering is active and what it subtracts.
// Throws std::runtime_error for a bad LLAMA_K_CENTER, an unsupported RoPE type, a vector
// file that does not fit the model, or full mode on a cache it cannot serve (SWA,
// several streams, rope_freqs factors, a non-F32 bias).
llama_k_center_state llama_k_center_build(
        const llama_model                                        & model,
        const llama_hparams                                      & hparams,
        const std::vector<uint32_t>                              & layer_ids,
        uint32_t                                                   n_stream,
        const std::function<ggml_backend_buffer_type_t(uint32_t)> & buft_of,
        const float                                              * hadamard,
        int64_t                                                    n_hadamard,
        llama_k_center_bufs                                      & bufs);

// The fold (decode on the CPU, llama_k_center_state::full_fold) as two CPU custom ops, in place of
// mul_mats whose contraction is only head_dim long (ggml's tiled F32 GEMM spends most of such a product
// summing its accumulators), a scale, permuting copies, a transposing copy, a mean, a broadcast
// subtraction, an add and a cast. Both run on all the CPU threads and abort through GGML_ASSERT on shapes that
// do not fit (a graph bug, not user input).
//
// llama_k_center_fold_table, once per ubatch:
//   w      F32 [head_dim, n_kv], contiguous: R(pos)·uA of each cell (ggml_rope of the unit)
// Returns F32 [16·head_dim, ceil(n_kv/16)]: tiles of 16 cells, in each tile head_dim rows of 16 values,
// w less its mean over the cells (cells past n_kv 0). The mean makes each head's term small in the F16
// mask (softmax ignores a constant per head, so its rounding does not matter).
ggml_tensor * llama_k_center_fold_table(ggml_context * ctx, ggml_tensor * w);

// llama_k_center_fold_mask, once per layer (one node where a mul_mat, a scale, a copy of q and a cast to F16 were:
// on two threads each of those cost ~0.5 µs of barrier and up to 4 µs of work per token and layer, docs/CPU.md):
//   table  the tiles above
//   q      F32 [head_dim, n_head, n_tok], any strides with nb[0] = 4: the unrotated queries
//   pair   F32 [head_dim, n_head_kv, 4] with nb[0] = 4: the layer's full_pair (slice 0 bA, 2 s, 3 the partner's
//          dim), head h using K/V head h / (n_head / n_head_kv)
//   mask   F32 [n_kv, >= n_tok]: the attention mask (0 or -inf), one row per token
//   scale  the scores' scale (kq_scale)
// Returns F16 [n_kv, n_tok, n_head], the mask flash attention reads: e[r, t, h] = mask[r, t] + Σ_j c[j, h, t] ·
// table(r, j) with c[j, h, t] = scale · (bA_j q[j, h, t] + s_j q[partner j, h, t]) = scale · (M q)_j (each thread
// computes every c; then the sum over j in order, one F32 multiply-add per j, 16 cells per vector, 8 heads per
// pass over a tile), rounded once to F16.
ggml_tensor * llama_k_center_fold_mask(ggml_context * ctx, ggml_tensor * table, ggml_tensor * q, ggml_tensor * pair,
                                       ggml_tensor * mask, float scale);
