// tqgguf: which barriers of ggml-cpu's graph loop a decode step can do without (patch 0015).
//
// Why: ggml-cpu runs a graph node by node and every thread waits at a barrier after each node
// (ggml_graph_compute_thread). On a small model decoding one token a node's work is a few
// microseconds or less, and the barrier costs ~0.45 us on two threads whatever the work
// (docs/CPU.md, session 25: SmolLM2-135M's turbo4/turbo4 decode spends 375 us of a 4.9 ms
// token in barriers). A rotated cache adds four nodes per layer (the Hadamard transforms of Q,
// K, V and the attention output, llama_mul_mat_hadamard), each followed by its barrier.
//
// A barrier after node A is needed only when a thread may touch, in node B, memory another
// thread touches in A. Three pairs are safe by construction and no others are taken:
//
//   1. ROPE -> the Hadamard transform (MUL_MAT with GGML_HINT_SRC0_IS_HADAMARD, computed by
//      ggml_compute_forward_fwht) of exactly the ROPE's rows. Both split rows the same way,
//      thread ith taking rows [ith*dr, min(ith*dr + dr, nr)) with dr = ceil(nr/nth)
//      (ggml_compute_forward_rope_flt, ggml_compute_forward_fwht_impl), so a thread transforms
//      only rows it rotated itself. The transform's output may lie on the ROPE's input (the
//      graph allocator reuses the projection's memory): allowed only at the same address with
//      the same rows, so a thread overwrites only rows it has read itself.
//   2. The Hadamard transform -> SET_ROWS of its output into a turbo cache, when the write is
//      one row split into blocks over the threads (patch 0014: block range
//      [ith*per, min(ith*per + per, nblk)), per = ceil(nblk/nth)) and each thread's blocks lie
//      within the rows it transformed (checked for every thread, so that all decide alike).
//   3. SET_ROWS -> SET_ROWS (the K and the V cache write of a layer): different tensors,
//      neither reading what the other writes, the second using no work buffer (below).
//
// Every pair also needs: B writes nothing that a node since the last barrier reads or writes,
// and reads nothing they write, other than the one link of pairs 1 and 2 (ranges of bytes
// compared); B uses no shared scratch (the transform uses no work buffer, nor does SET_ROWS of
// an F32 source, or F16 into F16 — an F16 source into another type converts through a slice
// of it — so a thread still in a ROPE, whose sin/cos cache lies in the work buffer, or in an
// earlier cache write, is not disturbed).
// The decision depends only on the graph and the thread count, so every thread makes the same.
//
// Included from ggml-cpu.c only (C; header-only so that ggml-cpu's source list is unchanged).
#pragma once

#include "ggml.h"
#include "ggml-impl.h"
#include "ggml-turbo.h"

#include <stdbool.h>
#include <stdint.h>

// nodes since the last barrier that ggml_turbo_barrier_skip looks at (a longer run keeps the barrier)
#define GGML_TURBO_BARRIER_CHAIN 4

// the Hadamard transform as ggml_compute_forward_mul_mat hands it to ggml_compute_forward_fwht: the hint, F32 in and
// out, the matrix F32 with no extra buffer's traits (an extra buffer type, e.g. KleidiAI's for an F16 matrix, would
// take the MUL_MAT first, with its own split and the work buffer)
static inline bool ggml_turbo_barrier_is_hadamard(const struct ggml_tensor * t) {
    return t->op == GGML_OP_MUL_MAT && ggml_get_op_params_i32(t, 1) == GGML_HINT_SRC0_IS_HADAMARD &&
           t->type == GGML_TYPE_F32 && t->src[1] != NULL && t->src[1]->type == GGML_TYPE_F32 &&
           t->src[0] != NULL && t->src[0]->type == GGML_TYPE_F32 && t->src[0]->extra == NULL;
}

// a SET_ROWS that uses no work buffer: ggml_compute_forward_set_rows_impl converts an F16 source for a destination
// of another type through a per-thread slice of it (another stride than a RoPE's sin/cos cache or an earlier write's)
static inline bool ggml_turbo_barrier_set_rows_no_scratch(const struct ggml_tensor * t) {
    return t->op == GGML_OP_SET_ROWS && t->src[0] != NULL &&
           (t->src[0]->type == GGML_TYPE_F32 || (t->src[0]->type == GGML_TYPE_F16 && t->type == GGML_TYPE_F16));
}

// whether the bytes of a and b overlap (NULL or empty: no)
static inline bool ggml_turbo_barrier_overlap(const struct ggml_tensor * a, const struct ggml_tensor * b) {
    if (a == NULL || b == NULL || a->data == NULL || b->data == NULL) {
        return false;
    }
    const char * a0 = (const char *) a->data, * a1 = a0 + ggml_nbytes(a);
    const char * b0 = (const char *) b->data, * b1 = b0 + ggml_nbytes(b);
    return a0 < b1 && b0 < a1;
}

// t and u: contiguous rows of the same length and number (so ggml-cpu splits them alike over the threads)
static inline bool ggml_turbo_barrier_rows_like(const struct ggml_tensor * t, const struct ggml_tensor * u) {
    return ggml_is_contiguous(t) && ggml_is_contiguous(u) && t->ne[0] == u->ne[0] && ggml_nrows(t) == ggml_nrows(u) &&
           ggml_nbytes(t) == ggml_nbytes(u);
}

// t and u: those rows at the same address
static inline bool ggml_turbo_barrier_same_rows(const struct ggml_tensor * t, const struct ggml_tensor * u) {
    return t->data == u->data && ggml_turbo_barrier_rows_like(t, u);
}

// pair 1: a ROPE, b the Hadamard transform of exactly its rows; also allows b's output on a's input
static inline bool ggml_turbo_barrier_rope_hadamard(const struct ggml_tensor * a, const struct ggml_tensor * b) {
    return a->op == GGML_OP_ROPE && a->type == GGML_TYPE_F32 && ggml_turbo_barrier_is_hadamard(b) &&
           ggml_turbo_barrier_same_rows(b->src[1], a) && ggml_turbo_barrier_rows_like(b, a);
}

// pair 2: a the Hadamard transform, b the one-row turbo SET_ROWS of its output, each thread's blocks
// inside the rows it transformed
static inline bool ggml_turbo_barrier_hadamard_set_rows(const struct ggml_tensor * a, const struct ggml_tensor * b, const int nth) {
    if (!ggml_turbo_barrier_is_hadamard(a) || b->op != GGML_OP_SET_ROWS || !ggml_turbo_type_is_turbo(b->type) || nth < 2) {
        return false;
    }
    const struct ggml_tensor * src = b->src[0];
    if (src->type != GGML_TYPE_F32 || src->data != a->data || !ggml_is_contiguous(a) || !ggml_is_contiguous(src) ||
            ggml_nrows(src) != 1 || src->ne[0] != ggml_nelements(a)) {
        return false;
    }
    const int64_t blck = ggml_blck_size(b->type);
    const int64_t nblk = src->ne[0] / blck;
    if (src->ne[0] % blck != 0 || nblk < 2) {
        return false;  // patch 0014's split is not taken
    }
    const int64_t n = a->ne[0], nr = ggml_nrows(a), dr = (nr + nth - 1)/nth, per = (nblk + nth - 1)/nth;
    for (int64_t ith = 0; ith < nth; ++ith) {
        const int64_t b0 = per*ith < nblk ? per*ith : nblk, b1 = b0 + per < nblk ? b0 + per : nblk;
        const int64_t r0 = dr*ith < nr ? dr*ith : nr, r1 = r0 + dr < nr ? r0 + dr : nr;
        if (b0 < b1 && !(r0*n <= b0*blck && b1*blck <= r1*n)) {
            return false;
        }
    }
    return true;
}

// True when the barrier between chain[n_chain - 1] and b may be left out: chain holds the nodes
// computed since the last barrier (1..GGML_TURBO_BARRIER_CHAIN, oldest first), b the next node to
// compute, nth the threads computing the graph.
static inline bool ggml_turbo_barrier_skip(const struct ggml_tensor * const * chain, const int n_chain,
                                           const struct ggml_tensor * b, const int nth) {
    if (n_chain < 1 || n_chain > GGML_TURBO_BARRIER_CHAIN) {
        return false;
    }
    const struct ggml_tensor * a = chain[n_chain - 1];
    const bool pair1 = ggml_turbo_barrier_rope_hadamard(a, b);
    const bool pair2 = !pair1 && ggml_turbo_barrier_hadamard_set_rows(a, b, nth);
    const bool pair3 = a->op == GGML_OP_SET_ROWS && ggml_turbo_barrier_set_rows_no_scratch(b);
    if (!pair1 && !pair2 && !pair3) {
        return false;
    }
    // the pair's link, b's source that reads a's output (pair 1: the transform's rows, src[1]; pair 2: the cache
    // write's rows, src[0]), and pair 1's one allowed overlap, the transform's output on the RoPE's input (src[0])
    const int link_src = pair1 ? 1 : pair2 ? 0 : -1;
    for (int c = 0; c < n_chain; ++c) {
        const struct ggml_tensor * m = chain[c];
        const bool last = c == n_chain - 1;
        if (ggml_turbo_barrier_overlap(b, m)) {
            return false;
        }
        for (int i = 0; i < GGML_MAX_SRC; ++i) {
            // b's output on m's input: only pair 1's rows in place
            if (ggml_turbo_barrier_overlap(b, m->src[i]) && !(last && pair1 && i == 0 && ggml_turbo_barrier_same_rows(b, m->src[0]))) {
                return false;
            }
            // b's input on m's output: only the link
            if (ggml_turbo_barrier_overlap(b->src[i], m) && !(last && i == link_src)) {
                return false;
            }
        }
    }
    return true;
}
