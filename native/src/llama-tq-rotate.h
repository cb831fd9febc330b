// tqgguf: the Hadamard rotations of Q, K and V of one layer as one CPU graph node.
//
// Upstream rotates Q, K and V for a quantized cache with three MUL_MAT nodes tagged
// GGML_HINT_SRC0_IS_HADAMARD (llama_mul_mat_hadamard: every group of n values times H_n / sqrt(n), H_n
// the Sylvester-Hadamard matrix), which the CPU backend runs as a fast Walsh-Hadamard transform. On
// the CPU every graph node ends in a barrier of all threads, and at one token a rotation is a few
// hundred values: the barriers, not the arithmetic, are what the three nodes cost (docs/CPU.md,
// "Speed, session 22"). This op does the three in one node, with the same arithmetic in the same order
// (scale by 1/sqrt(n) first, then the butterflies u + v, u - v for len = 1, 2, 4, ..., n/2), so its
// values are upstream's to the bit.
//
// Used by the graph (patch 0013) only where every layer's cache is in host memory and computed on the
// CPU device (llama_tq_rotate_one_node_ok), so the node never moves work off a GPU;
// LLAMA_TQ_ROT_ONE_NODE=0 keeps upstream's three nodes (for A/B runs).
#pragma once

#include "ggml.h"
#include "ggml-backend.h"

#include <cstdint>
#include <functional>
#include <vector>

struct llama_model;

// y = H_n x / sqrt(n) for one group of n values (n a power of 2; y and x may not overlap), in upstream's
// order of operations (ggml-cpu's fwht: every value times 1/sqrt(n) first, then the butterfly stages
// u + v, u - v by growing distance 1, 2, ..., n/2), so that its floats are upstream's to the bit.
void llama_tq_fwht(float * y, const float * x, int64_t n);

// q [D, n_head, n_tok], k [D, n_head_kv, n_tok], v [D, n_head_kv_v, n_tok]: F32, rows of D values
// contiguous (any row and token strides), the same n_tok; rot_k, rot_v: the rotation matrices upstream
// builds (F32 [n, n]; only n = ne[0] is read: the group size, a power of 2 dividing D). Returns F32
// [D, n_head + n_head_kv + n_head_kv_v, n_tok], contiguous: the rotated heads of q, then k, then v, per
// token (llama_tq_rotated_part gives each as a view). Aborts (GGML_ASSERT) on shapes outside that.
ggml_tensor * llama_tq_rotate_qkv(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v,
                                  ggml_tensor * rot_k, ggml_tensor * rot_v);

// part 0 (q), 1 (k) or 2 (v) of llama_tq_rotate_qkv's result, as a [D, heads, n_tok] view (rows
// contiguous, token stride of the whole)
ggml_tensor * llama_tq_rotated_part(ggml_context * ctx, ggml_tensor * qkv, ggml_tensor * q, ggml_tensor * k, int part);

// whether the graph may use llama_tq_rotate_qkv for a cache of these layers: LLAMA_TQ_ROT_ONE_NODE
// (default on) and every layer computed on the CPU device with its K/V buffer type host memory
bool llama_tq_rotate_one_node_ok(const llama_model & model, const std::vector<uint32_t> & layer_ids,
                                 const std::function<ggml_backend_buffer_type_t(uint32_t)> & buft_of);
