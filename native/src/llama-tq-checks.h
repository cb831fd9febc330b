// tqgguf: checks that turn bad input into clear refusals instead of asserts, signals or
// silently wrong output (tqgguf issue 10). The public part is include/llama-tq.h.
//
//   llama_tq_check_context_params  type_k/type_v ids and block size vs head dims, run by
//                                  llama_init_from_model before the context exists
//                                  (whatever the flash attention mode)
//   llama_tq_env_bool              boolean engine variables (LLAMA_ATTN_ROT_DISABLE):
//                                  1/0, true/false, yes/no, on/off or refused
//   llama_tq_check_fa_placement    a turbo cache's flash attention runs on the device that
//                                  holds the layer (never moved to the CPU without a word)
//   llama_kv_signature             what a KV cache's state depends on; written at the
//                                  head of every state (full or per sequence) and
//                                  compared on restore, naming each mismatch

#pragma once

#include "llama.h"

#include <cstdint>
#include <string>

struct llama_model;
struct llama_context;
class llama_memory_context_i;
class llama_io_write_i;
class llama_io_read_i;

// Called for every error-level log line (llama-impl.cpp): keeps it for llama_tq_errors().
void llama_tq_note_error(const char * text);

// "" when type_k/type_v are KV cache types that fit every layer's head dims, else the
// reason, naming the type (by name and id), its block size, the head dim and what is
// allowed. Never asserts: ids outside ggml's range are reported, not looked up.
std::string llama_tq_check_context_params(const llama_model & model, const llama_context_params & params);

// "" unless a K or V cache of a turbo type would have its flash attention scheduled on
// another device than the layer it belongs to (a backend without a kernel for that pair or
// head dim: ggml's scheduler would silently run it on the CPU); then the reason, naming the
// layer, the K/V pair, the head dims and both devices. Reserves the probe graph that
// llama_context::resolve_fused_ops reserves for -fa auto; called when flash attention is on.
// A model with no GPU device in use returns "" at once (nothing can be scheduled elsewhere).
std::string llama_tq_check_fa_placement(llama_context & ctx, const llama_model & model,
        const llama_memory_context_i * mctx, uint32_t n_seqs);

// Value of a boolean environment variable: dflt when unset or empty; 1/0, true/false,
// yes/no, on/off (any case, surrounding blanks ignored). Throws std::runtime_error naming
// the variable, the value and the accepted spellings for anything else.
bool llama_tq_env_bool(const char * name, bool dflt);

// What the bytes of a KV cache state mean. A restore into a cache whose signature differs
// would read the bytes with another meaning (other block format, other rotation frame,
// other subtracted vector), so it is refused.
struct llama_kv_signature {
    std::string type_k;       // ggml type names
    std::string type_v;
    bool        rot_k = false; // Hadamard rotation of K / V (attn_rot_k/v)
    bool        rot_v = false;
    std::string k_center;     // K centering identity: "none" or mode + hash of the vectors
    int32_t     head_k = 0;   // n_embd_head_k_all / n_embd_head_v_all (-1: varies by layer)
    int32_t     head_v = 0;
    bool        v_trans = false;
    uint32_t    n_layer = 0;

    // key=value lines (the stored form)
    std::string serialize() const;
};

// Write the signature (magic, version, text) to a state.
void llama_kv_signature_write(llama_io_write_i & io, const llama_kv_signature & sig);

// Read a state's signature and compare it with the cache's own. Throws std::runtime_error
// naming every mismatch ("K cache type: state has turbo4, context has turbo3"), or saying
// that the state carries no signature (saved by a build without it), before any cache
// data is read.
void llama_kv_signature_check(llama_io_read_i & io, const llama_kv_signature & mine);

// 64-bit FNV-1a over bytes, continuing from h (for the K centering identity).
uint64_t llama_tq_fnv1a(const void * data, size_t n, uint64_t h = 1469598103934665603ull);
