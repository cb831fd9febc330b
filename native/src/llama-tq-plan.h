// tqgguf: per-layer K/V cache types (a "layer plan").
//
// llama.cpp gives every layer of a KV cache the same K type and the same V type
// (-ctk/-ctv). A layer plan overrides them for chosen layers: e.g. keep the first and last
// two layers at q8_0 while the rest use turbo3, or keep sliding-window layers (whose cache
// is capped at the window) at f16. Read from the environment variable LLAMA_KV_PLAN when a
// KV cache is created (like LLAMA_K_CENTER, llama-kv-center.h), so every tool built from
// the patched tree honours it.
//
//   LLAMA_KV_PLAN = ENTRY[;ENTRY...]
//   ENTRY         = SELECTOR:K/V            K, V: KV cache type names (f16, q8_0, turbo3, ...)
//   SELECTOR      = swa                     every sliding-window layer
//                 | RANGE[,RANGE...]        RANGE = N or A-B (model layer indices, inclusive)
//
//   e.g. LLAMA_KV_PLAN="0-1,22-23:q8_0/q8_0"    LLAMA_KV_PLAN="swa:f16/f16"
//
// Layers no entry names keep -ctk/-ctv. An explicit layer entry wins over "swa". Refused
// (std::runtime_error naming the entry and what is allowed): a syntax error, an unknown
// type, ranges that overlap, a layer the model does not have, two "swa" entries, a type
// whose block size does not divide a layer's head dim, and a quantized V on a cache
// without flash attention (V stored transposed).

#pragma once

#include "ggml.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

struct llama_hparams;

struct llama_kv_plan {
    struct entry {
        bool                                        swa = false; // selector "swa"
        std::vector<std::pair<uint32_t, uint32_t>>  ranges;      // inclusive [first, last]
        ggml_type                                   type_k = GGML_TYPE_F16;
        ggml_type                                   type_v = GGML_TYPE_F16;
    };

    std::string        text;    // the LLAMA_KV_PLAN value ("" = no plan)
    std::vector<entry> entries;

    bool empty() const { return entries.empty(); }

    // Parse a LLAMA_KV_PLAN value (nullptr or blank = no plan). Throws std::runtime_error
    // naming the entry and the accepted forms.
    static llama_kv_plan parse(const char * value);

    // The K and V types of model layer il (is_swa: a sliding-window layer); dflt_k/dflt_v
    // (-ctk/-ctv) when no entry names it.
    std::pair<ggml_type, ggml_type> types(uint32_t il, bool is_swa, ggml_type dflt_k, ggml_type dflt_v) const;

    // Refuse a plan that does not fit the model: a layer index >= n_layer, a type whose
    // block size does not divide the head dim of a layer it is given to, a quantized V
    // when the cache stores V transposed (flash attention off). Throws std::runtime_error.
    void check(const llama_hparams & hparams, bool v_trans) const;
};

// LLAMA_KV_PLAN, parsed and checked against the model (an empty plan when unset).
llama_kv_plan llama_kv_plan_from_env(const llama_hparams & hparams, bool v_trans);

// One cache layer as the plan summary sees it.
struct llama_kv_plan_layer {
    uint32_t  il;
    ggml_type type_k;
    ggml_type type_v;      // GGML_TYPE_COUNT: the layer has no V (MLA)
    int64_t   n_embd_k;    // values per token (n_embd_k_gqa)
    int64_t   n_embd_v;
};

// "turbo3" when every layer has the same type, else runs "0-1:q8_0,2-21:turbo3,22-23:q8_0"
// (used in the log and in the state signature, llama-tq-checks.h).
std::string llama_kv_plan_types_label(const std::vector<llama_kv_plan_layer> & layers, bool v);

// Log the plan of one cache: its layers' K/V types in runs and the bytes per token and
// bits per value they make (one token, one stream), e.g.
//   kv_plan = 0-1,22-23:q8_0/q8_0: layers 0-1 q8_0/q8_0, 2-21 turbo3/turbo3, 22-23 q8_0/q8_0
//   (24 layers); 4224 bytes per token, 4.125 bits/value
void llama_kv_plan_log(const llama_kv_plan & plan, const std::vector<llama_kv_plan_layer> & layers);
