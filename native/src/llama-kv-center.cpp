// tqgguf: K centering for the KV cache (see llama-kv-center.h).

#include "llama-kv-center.h"

#include "llama-hparams.h"
#include "llama-impl.h"
#include "llama-model.h"
#include "llama-tq-checks.h"

#include "gguf.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

static const char * const K_CENTER_FORMS = "off, bias, bias:N (N = period threshold in tokens), file:PATH, full";

llama_k_center_config llama_k_center_config::parse(const char * value) {
    llama_k_center_config cfg;
    if (value == nullptr) {
        return cfg;
    }
    const std::string v = value;
    if (v.empty() || v == "0" || v == "off") {
        return cfg;
    }
    if (v == "full") {
        cfg.kind = mode::full;
        return cfg;
    }
    if (v == "bias" || v == "1") {
        cfg.kind = mode::bias;
        return cfg;
    }
    if (v.rfind("bias:", 0) == 0) {
        const std::string n = v.substr(5);
        char * end = nullptr;
        errno = 0;
        const long long ctx = n.empty() ? 0 : strtoll(n.c_str(), &end, 10);
        if (n.empty() || *end != '\0' || errno != 0 || ctx < 1 || ctx > UINT32_MAX) {
            throw std::runtime_error(format("LLAMA_K_CENTER=%s: the threshold after 'bias:' must be a positive "
                                            "number of tokens; allowed: %s", value, K_CENTER_FORMS));
        }
        cfg.kind = mode::bias;
        cfg.ctx  = (uint32_t) ctx;
        return cfg;
    }
    if (v.rfind("file:", 0) == 0 && v.size() > 5) {
        cfg.kind = mode::file;
        cfg.path = v.substr(5);
        return cfg;
    }
    throw std::runtime_error(format("LLAMA_K_CENTER=%s is not understood; allowed: %s", value, K_CENTER_FORMS));
}

// values of a model tensor as F32 (F32/F16 only), wherever its buffer lives
static std::vector<float> tensor_to_f32(const ggml_tensor * t) {
    const int64_t n = ggml_nelements(t);
    std::vector<float> out(n);
    if (t->type == GGML_TYPE_F32) {
        ggml_backend_tensor_get(t, out.data(), 0, ggml_nbytes(t));
    } else if (t->type == GGML_TYPE_F16) {
        std::vector<ggml_fp16_t> h(n);
        ggml_backend_tensor_get(t, h.data(), 0, ggml_nbytes(t));
        ggml_fp16_to_fp32_row(h.data(), out.data(), n);
    } else {
        throw std::runtime_error(format("LLAMA_K_CENTER=bias: %s is %s; only F32/F16 biases can be read exactly",
                                        ggml_get_name(t), ggml_type_name(t->type)));
    }
    return out;
}

// Head dims whose bias component is (close to) constant after RoPE: the two dims of every
// pair whose period 2*pi/theta_i exceeds `threshold` tokens, and every dim RoPE leaves alone.
// theta_i = freq_scale * base^(-2i/n_rot) / factor_i, as ggml's rope computes it for the
// slow (interpolated) pairs (ggml-cpu ops.cpp rope_yarn, ggml_rope_cache_init); pairing
// NEOX = (i, i + n_rot/2), NORM = (2i, 2i+1) (llama.cpp llama_model_rope_type).
static std::vector<bool> slow_dims(const llama_model & model, const llama_hparams & hp, uint32_t il,
                                   uint32_t threshold, uint32_t & n_pairs_slow) {
    const uint32_t head_dim = hp.n_embd_head_k(il);
    const uint32_t n_rot    = hp.has_rope(il) ? hp.n_rot(il) : 0;

    std::vector<bool> mask(head_dim, false);
    for (uint32_t d = n_rot; d < head_dim; ++d) {
        mask[d] = true;
    }
    n_pairs_slow = 0;
    if (n_rot == 0) {
        return mask;
    }
    if (hp.rope_type != LLAMA_ROPE_TYPE_NEOX && hp.rope_type != LLAMA_ROPE_TYPE_NORM) {
        throw std::runtime_error(format("LLAMA_K_CENTER=bias: RoPE type %d of this model is not supported "
                                        "(only norm = 0 and neox = 2)", (int) hp.rope_type));
    }
    const bool  swa   = hp.is_swa(il);
    const float base  = swa ? hp.rope_freq_base_train_swa  : hp.rope_freq_base_train;
    const float scale = swa ? hp.rope_freq_scale_train_swa : hp.rope_freq_scale_train;

    std::vector<float> factors;
    if (model.layers[il].rope_freqs) {
        factors = tensor_to_f32(model.layers[il].rope_freqs);
    }
    for (uint32_t i = 0; i < n_rot/2; ++i) {
        double theta = scale * std::pow((double) base, -2.0 * i / n_rot);
        if (i < factors.size() && factors[i] > 0.0f) {
            theta /= factors[i];
        }
        const double period = 2.0 * M_PI / theta;
        if (period > threshold) {
            const uint32_t a = hp.rope_type == LLAMA_ROPE_TYPE_NEOX ? i          : 2*i;
            const uint32_t b = hp.rope_type == LLAMA_ROPE_TYPE_NEOX ? i + n_rot/2 : 2*i + 1;
            mask[a] = mask[b] = true;
            n_pairs_slow++;
        }
    }
    return mask;
}

static bool is_k_bias(const ggml_tensor * t, uint32_t il) {
    return t && strcmp(ggml_get_name(t), format("blk.%u.attn_k.bias", il).c_str()) == 0;
}

// full mode's per-layer pair tensors and the shared unit tensor (llama_k_center_state::full_pair,
// full_unit), when every layer in st.full_bias has one shape; each layer's beside its K cache, the
// unit beside the first layer's
static void build_full_pairs(const llama_model & model, const llama_hparams & hparams, llama_k_center_state & st,
                             const std::function<ggml_backend_buffer_type_t(uint32_t)> & buft_of,
                             llama_k_center_bufs & bufs) {
    const uint32_t il0      = st.full_bias.begin()->first;
    const int64_t  head_dim = hparams.n_embd_head_k(il0);
    const int64_t  n_head   = hparams.n_head_kv(il0);
    const int64_t  n_rot    = hparams.n_rot(il0);
    for (const auto & [il, bk] : st.full_bias) {
        if ((int64_t) hparams.n_embd_head_k(il) != head_dim || (int64_t) hparams.n_head_kv(il) != n_head ||
                (int64_t) hparams.n_rot(il) != n_rot) {
            return;  // the graph ropes each layer's bias
        }
    }
    const bool neox = hparams.rope_type == LLAMA_ROPE_TYPE_NEOX;
    // pair of dim j < n_rot: its first and second dims (llama.cpp: NEOX (i, i + n_rot/2), NORM (2i, 2i+1))
    auto first  = [&](int64_t j) { return neox ? (j < n_rot/2 ? j : j - n_rot/2) : j - j % 2; };
    auto second = [&](int64_t j) { return neox ? (j < n_rot/2 ? j + n_rot/2 : j) : j - j % 2 + 1; };

    std::map<ggml_backend_buffer_type_t, ggml_context_ptr> ctxs;
    auto ctx_of = [&](uint32_t il) {
        ggml_backend_buffer_type_t buft = buft_of(il);
        auto it = ctxs.find(buft);
        if (it == ctxs.end()) {
            ggml_init_params params = { (st.full_bias.size() + 1)*ggml_tensor_overhead(), nullptr, true };
            it = ctxs.emplace(buft, ggml_context_ptr { ggml_init(params) }).first;
        }
        return it->second.get();
    };
    st.full_fold = llama_tq_env_bool("LLAMA_K_CENTER_FOLD", true);
    for (const auto & [il, bk] : st.full_bias) {
        // the layer computed on the CPU device and its K cache in host memory: attention runs on the
        // CPU (with its K/V elsewhere, or the layer on a GPU, the scheduler may run it where one mask
        // row serves all heads)
        st.full_fold = st.full_fold && ggml_backend_buft_is_host(buft_of(il)) &&
                       ggml_backend_dev_type(model.dev_layer(il)) == GGML_BACKEND_DEVICE_TYPE_CPU;
    }
    st.full_unit = ggml_new_tensor_3d(ctx_of(il0), GGML_TYPE_F32, head_dim, n_head, 2);
    ggml_set_name(st.full_unit, "k_center_full_unit");
    // with the fold, two more slices: 2 = the partner's coefficient, 3 = the partner's dim (llama-kv-center.h)
    const int64_t n_slices = st.full_fold ? 4 : 2;
    for (const auto & [il, bk] : st.full_bias) {
        st.full_pair[il] = ggml_new_tensor_3d(ctx_of(il), GGML_TYPE_F32, head_dim, n_head, n_slices);
        ggml_format_name(st.full_pair[il], "k_center_full_pair_l%u", il);
    }
    for (auto & [buft, ctx] : ctxs) {
        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), buft);
        if (!buf) {
            throw std::runtime_error("failed to allocate the K centering (full) pair tensors");
        }
        bufs.emplace_back(std::move(ctx), ggml_backend_buffer_ptr { buf });
    }
    const int64_t n = head_dim*n_head;
    std::vector<float> u(2*n, 0.0f);
    for (int64_t h = 0; h < n_head; ++h) {
        for (int64_t j = 0; j < head_dim; ++j) {
            u[    h*head_dim + j] = j >= n_rot || j == first(j)  ? 1.0f : 0.0f;
            u[n + h*head_dim + j] = j <  n_rot && j == second(j) ? 1.0f : 0.0f;
        }
    }
    ggml_backend_tensor_set(st.full_unit, u.data(), 0, ggml_nbytes(st.full_unit));
    for (const auto & [il, bk] : st.full_bias) {
        const std::vector<float> b = tensor_to_f32(bk);  // [head_dim, n_head]
        std::vector<float> p(n_slices*n, 0.0f);
        for (int64_t h = 0; h < n_head; ++h) {
            const float * bh = b.data() + h*head_dim;
            for (int64_t j = 0; j < head_dim; ++j) {
                p[    h*head_dim + j] = j < n_rot ? bh[first(j)]  : bh[j];
                p[n + h*head_dim + j] = j < n_rot ? bh[second(j)] : 0.0f;
            }
            if (n_slices == 2) {
                continue;
            }
            // c = M q as c_j = bA_j q_j + s_j q_(partner j) (llama-kv-center.h): a pair (f, s) has c_f = b_f q_f + b_s q_s
            // and c_s = b_f q_s - b_s q_f, an unrotated dim j c_j = b_j q_j (partner j, coefficient 0)
            for (int64_t j = 0; j < head_dim; ++j) {
                const bool    rotated = j < n_rot;
                const int64_t partner = !rotated ? j : j == first(j) ? second(j) : first(j);
                p[2*n + h*head_dim + j] = !rotated ? 0.0f : j == first(j) ? bh[second(j)] : -bh[j];
                p[3*n + h*head_dim + j] = (float) partner;  // exact: head_dim < 2^24
            }
        }
        ggml_backend_tensor_set(st.full_pair.at(il), p.data(), 0, ggml_nbytes(st.full_pair.at(il)));
    }
}

// full mode: the model's K biases, after checking the cache can add them back exactly
static llama_k_center_state build_full(const llama_model & model, const llama_hparams & hparams,
                                       const std::vector<uint32_t> & layer_ids, uint32_t n_stream,
                                       const std::function<ggml_backend_buffer_type_t(uint32_t)> & buft_of,
                                       llama_k_center_bufs & bufs) {
    llama_k_center_state st;
    for (uint32_t il : layer_ids) {
        ggml_tensor * bk = model.layers[il].wk_b;
        if (!is_k_bias(bk, il) || ggml_nelements(bk) != (int64_t) hparams.n_embd_k_gqa(il)) {
            continue;
        }
        if (bk->type != GGML_TYPE_F32 || model.layers[il].rope_freqs || !hparams.has_rope(il)) {
            throw std::runtime_error(format("LLAMA_K_CENTER=full: layer %u has a %s bias%s; full needs an F32 bias "
                                            "and plain RoPE; use bias", il, ggml_type_name(bk->type),
                                            model.layers[il].rope_freqs ? " and rope_freqs factors" : ""));
        }
        st.full_bias[il] = bk;
    }
    if (!st.full_bias.empty() && (hparams.swa_type != LLAMA_SWA_TYPE_NONE || n_stream != 1)) {
        throw std::runtime_error("LLAMA_K_CENTER=full: supported for caches without sliding-window layers and "
                                 "with one stream (one sequence, or a unified KV cache); use bias or file:PATH");
    }
    if (!st.full_bias.empty() && hparams.rope_type != LLAMA_ROPE_TYPE_NEOX && hparams.rope_type != LLAMA_ROPE_TYPE_NORM) {
        throw std::runtime_error(format("LLAMA_K_CENTER=full: RoPE type %d of this model is not supported "
                                        "(only norm = 0 and neox = 2)", (int) hparams.rope_type));
    }
    uint64_t h = llama_tq_fnv1a("full", 4);
    for (const auto & [il, bk] : st.full_bias) {
        const std::vector<float> b = tensor_to_f32(bk);
        h = llama_tq_fnv1a(&il, sizeof(il), h);
        h = llama_tq_fnv1a(b.data(), b.size()*sizeof(float), h);
    }
    if (!st.full_bias.empty()) {
        st.identity = format("full %016llx", (unsigned long long) h);
        build_full_pairs(model, hparams, st, buft_of, bufs);
    }
    if (st.full_bias.empty()) {
        LLAMA_LOG_INFO("%s: k_center = full (no layer of this model has an attn_k.bias): inactive, nothing to "
                       "subtract in %zu layers\n", __func__, layer_ids.size());
    } else {
        LLAMA_LOG_INFO("%s: k_center = full (the cache stores k - R(pos)·attn_k.bias; attention adds it back per "
                       "cell%s): active on %zu of %zu layers\n", __func__,
                       st.full_pair.empty() ? "" : st.full_fold ? "; R(pos) of the pair units once per ubatch for all layers, "
                                                   "and in decode (<= 4 tokens) q·R(pos)·b in the attention mask, no K copy" :
                                                   "; R(pos) of the pair units once per ubatch for all layers",
                       st.full_bias.size(), layer_ids.size());
    }
    return st;
}

llama_k_center_state llama_k_center_build(
        const llama_model                                        & model,
        const llama_hparams                                      & hparams,
        const std::vector<uint32_t>                              & layer_ids,
        uint32_t                                                   n_stream,
        const std::function<ggml_backend_buffer_type_t(uint32_t)> & buft_of,
        const float                                              * hadamard,
        int64_t                                                    n_hadamard,
        llama_k_center_bufs                                      & bufs) {
    const char * env = getenv("LLAMA_K_CENTER");
    const llama_k_center_config cfg = llama_k_center_config::parse(env);

    llama_k_center_state state;
    std::map<uint32_t, llama_k_center_layer> & res = state.fixed;
    if (cfg.kind == llama_k_center_config::mode::off) {
        return state;
    }
    if (cfg.kind == llama_k_center_config::mode::full) {
        return build_full(model, hparams, layer_ids, n_stream, buft_of, bufs);
    }

    // 1. the vectors, in the unrotated post-RoPE frame
    std::map<uint32_t, std::vector<float>> vecs;
    std::string what;
    if (cfg.kind == llama_k_center_config::mode::bias) {
        const uint32_t threshold = cfg.ctx ? cfg.ctx : hparams.n_ctx_train;
        uint32_t pairs = 0;
        uint32_t n_rot = 0;
        for (uint32_t il : layer_ids) {
            const ggml_tensor * bk = model.layers[il].wk_b;
            if (!is_k_bias(bk, il) || ggml_nelements(bk) != (int64_t) hparams.n_embd_k_gqa(il)) {
                continue;
            }
            const std::vector<bool> mask = slow_dims(model, hparams, il, threshold, pairs);
            n_rot = hparams.n_rot(il);
            std::vector<float> m = tensor_to_f32(bk);
            const uint32_t head_dim = hparams.n_embd_head_k(il);
            for (size_t j = 0; j < m.size(); ++j) {
                if (!mask[j % head_dim]) {
                    m[j] = 0.0f;
                }
            }
            vecs[il] = std::move(m);
        }
        what = vecs.empty()
            ? std::string("bias (no layer of this model has an attn_k.bias)")
            : format("bias (attn_k.bias in RoPE pairs with period > %u tokens: %u of %u pairs per head, "
                     "and unrotated dims)", threshold, pairs, n_rot/2);
    } else {
        ggml_context * meta = nullptr;
        gguf_init_params gp = { /*.no_alloc =*/ false, /*.ctx =*/ &meta };
        gguf_context_ptr g { gguf_init_from_file(cfg.path.c_str(), gp) };
        ggml_context_ptr meta_ptr { meta };
        if (!g) {
            throw std::runtime_error(format("LLAMA_K_CENTER=file:%s: cannot read it as a GGUF file",
                                            cfg.path.c_str()));
        }
        for (uint32_t il : layer_ids) {
            const std::string name = format("blk.%u.k_center", il);
            const ggml_tensor * t = ggml_get_tensor(meta, name.c_str());
            const int64_t n = hparams.n_embd_k_gqa(il);
            if (!t) {
                throw std::runtime_error(format("LLAMA_K_CENTER=file:%s has no tensor %s (one F32 tensor of "
                                                "n_embd_k_gqa = %lld values per layer is needed)",
                                                cfg.path.c_str(), name.c_str(), (long long) n));
            }
            if (t->type != GGML_TYPE_F32 || ggml_nelements(t) != n) {
                throw std::runtime_error(format("LLAMA_K_CENTER=file:%s: %s is %s with %lld values; this model "
                                                "needs F32 with n_embd_k_gqa = %lld", cfg.path.c_str(),
                                                name.c_str(), ggml_type_name(t->type),
                                                (long long) ggml_nelements(t), (long long) n));
            }
            const float * d = (const float *) t->data;
            vecs[il] = std::vector<float>(d, d + n);
        }
        what = format("file %s", cfg.path.c_str());
    }

    // drop all-zero vectors: nothing to subtract there
    double   norm_max = 0.0;
    uint32_t il_max   = 0;
    for (auto it = vecs.begin(); it != vecs.end();) {
        double s = 0.0;
        for (float x : it->second) {
            s += (double) x * x;
        }
        if (s == 0.0) {
            it = vecs.erase(it);
            continue;
        }
        if (std::sqrt(s) > norm_max) {
            norm_max = std::sqrt(s);
            il_max   = it->first;
        }
        ++it;
    }
    if (vecs.empty()) {
        LLAMA_LOG_INFO("%s: k_center = %s: inactive, nothing to subtract in %zu layers\n", __func__,
                       what.c_str(), layer_ids.size());
        return state;
    }

    const char * label = cfg.kind == llama_k_center_config::mode::bias ? "bias" : "file";
    uint64_t h = llama_tq_fnv1a(label, strlen(label));
    for (const auto & [il, m] : vecs) {
        h = llama_tq_fnv1a(&il, sizeof(il), h);
        h = llama_tq_fnv1a(m.data(), m.size()*sizeof(float), h);
    }
    state.identity = format("%s %016llx", label, (unsigned long long) h);

    // 2. tensors beside each layer's K cache
    std::map<ggml_backend_buffer_type_t, ggml_context_ptr> ctxs;
    for (auto & [il, m] : vecs) {
        ggml_backend_buffer_type_t buft = buft_of(il);
        auto it = ctxs.find(buft);
        if (it == ctxs.end()) {
            ggml_init_params params = { 2*layer_ids.size()*ggml_tensor_overhead(), nullptr, true };
            it = ctxs.emplace(buft, ggml_context_ptr { ggml_init(params) }).first;
        }
        ggml_context * ctx = it->second.get();
        llama_k_center_layer & l = res[il];
        l.store = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, (int64_t) m.size());
        ggml_format_name(l.store, "k_center_l%u", il);
        const uint32_t n_rot = hparams.has_rope(il) ? hparams.n_rot(il) : 0;
        if (n_rot > 0) {
            l.rope = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_rot, hparams.n_head_kv(il));
            ggml_format_name(l.rope, "k_center_rope_l%u", il);
        }
    }
    for (auto & [buft, ctx] : ctxs) {
        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), buft);
        if (!buf) {
            throw std::runtime_error("failed to allocate the K centering vectors");
        }
        bufs.emplace_back(std::move(ctx), ggml_backend_buffer_ptr { buf });
    }
    for (auto & [il, m] : vecs) {
        const llama_k_center_layer & l = res.at(il);
        std::vector<float> stored = m;
        if (hadamard) {  // the cache holds H·k per block of n_hadamard (llama_mul_mat_hadamard)
            const int64_t n = n_hadamard;
            GGML_ASSERT(m.size() % n == 0);
            for (size_t b0 = 0; b0 < m.size(); b0 += n) {
                for (int64_t i = 0; i < n; ++i) {
                    double s = 0.0;
                    for (int64_t j = 0; j < n; ++j) {
                        s += (double) hadamard[i*n + j] * m[b0 + j];
                    }
                    stored[b0 + i] = (float) s;
                }
            }
        }
        ggml_backend_tensor_set(l.store, stored.data(), 0, ggml_nbytes(l.store));
        if (l.rope) {
            const int64_t head_dim = hparams.n_embd_head_k(il);
            const int64_t n_rot    = l.rope->ne[0];
            std::vector<float> r(ggml_nelements(l.rope));
            for (int64_t h = 0; h < l.rope->ne[1]; ++h) {
                memcpy(r.data() + h*n_rot, m.data() + h*head_dim, n_rot*sizeof(float));
            }
            ggml_backend_tensor_set(l.rope, r.data(), 0, ggml_nbytes(l.rope));
        }
    }
    LLAMA_LOG_INFO("%s: k_center = %s: active on %zu of %zu layers, |m| max %.3f (layer %u)%s\n", __func__,
                   what.c_str(), res.size(), layer_ids.size(), norm_max, il_max,
                   hadamard ? ", stored in the rotated frame" : "");
    return state;
}

// ---- the fold's table and mask (llama_k_center_fold_table, llama_k_center_fold_mask) ----

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(__clang__) && defined(__ELF__)
// libllama is built for the baseline ISA; the kernels are compiled once per level and the dynamic loader picks
// one (an ELF ifunc; GCC on other targets, clang and MSVC get the one baseline build)
#define K_CENTER_FOLD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define K_CENTER_FOLD_CLONES
#endif

#if defined(__GNUC__)
typedef float k_center_f32x16 __attribute__((vector_size(64)));  // 16 cells; split by the compiler to the target's width
#if defined(__FLT16_MAX__)
// the mask's 16 cells as F16, converted in the clone's ISA (F16C's vcvtps2ph from x86-64-v3 on, round to nearest
// even as ggml's own conversion; ggml_fp32_to_fp16_row in the baseline-built ggml-base converts one value at a time
// in software, ~10x slower: 7 µs per layer for Qwen2.5-0.5B's 14 heads x 256 cells)
typedef _Float16 k_center_f16x16 __attribute__((vector_size(32)));
#endif
#define K_CENTER_INLINE inline __attribute__((always_inline))
#else
#define K_CENTER_INLINE inline
#endif

static constexpr int64_t K_CENTER_FOLD_TILE = 16;  // cells per table tile, and per vector of the mask op

K_CENTER_FOLD_CLONES
static void k_center_fold_table_dims(ggml_tensor * dst, int64_t j0, int64_t j1) {
    const ggml_tensor * w = dst->src[0];
    const int64_t D = w->ne[0], n_kv = w->ne[1], T = K_CENTER_FOLD_TILE;
    std::vector<float> mean(j1 - j0, 0.0f);
    for (int64_t r = 0; r < n_kv; ++r) {
        const float * wr = (const float *) ((const char *) w->data + r*w->nb[1]);
        for (int64_t j = j0; j < j1; ++j) {
            mean[j - j0] += wr[j];
        }
    }
    for (float & m : mean) {
        m /= (float) n_kv;
    }
    float * out = (float *) dst->data;
    for (int64_t r = 0; r < dst->ne[1]*T; ++r) {
        float * o = out + (r/T)*T*D + r%T;
        if (r >= n_kv) {  // the last tile's cells past n_kv
            for (int64_t j = j0; j < j1; ++j) {
                o[j*T] = 0.0f;
            }
            continue;
        }
        const float * wr = (const float *) ((const char *) w->data + r*w->nb[1]);
        for (int64_t j = j0; j < j1; ++j) {
            o[j*T] = wr[j] - mean[j - j0];
        }
    }
}

static void k_center_fold_table_op(ggml_tensor * dst, int ith, int nth, void * /*userdata*/) {
    const int64_t D = dst->src[0]->ne[0], per = (D + nth - 1)/nth;
    const int64_t j0 = std::min(D, ith*per), j1 = std::min(D, j0 + per);
    if (j0 < j1) {
        k_center_fold_table_dims(dst, j0, j1);
    }
}

ggml_tensor * llama_k_center_fold_table(ggml_context * ctx, ggml_tensor * w) {
    GGML_ASSERT(w->type == GGML_TYPE_F32 && w->nb[0] == sizeof(float) && ggml_nrows(w) == w->ne[1]);
    const int64_t n_tiles = (w->ne[1] + K_CENTER_FOLD_TILE - 1)/K_CENTER_FOLD_TILE;
    ggml_tensor * args[1] = { w };
    return ggml_custom_4d(ctx, GGML_TYPE_F32, K_CENTER_FOLD_TILE*w->ne[0], n_tiles, 1, 1, args, 1,
                          k_center_fold_table_op, GGML_N_TASKS_MAX, nullptr);
}

// e[h][i] = mk[i] + Σ_j c[h][j] · w[16·j + i] for NH heads of one token and one tile (nr <= 16 cells valid),
// written as F16
template <int NH>
static K_CENTER_INLINE void k_center_fold_tile(ggml_fp16_t * const * e, const float * mk, const float * w,
        const float * const * c, int64_t D, int nr) {
    float out[K_CENTER_FOLD_TILE];
#if defined(__GNUC__)
    if (nr == K_CENTER_FOLD_TILE) {
        k_center_f32x16 acc[NH];
        for (int h = 0; h < NH; ++h) {
            acc[h] = k_center_f32x16{};
        }
        for (int64_t j = 0; j < D; ++j) {
            k_center_f32x16 wv;
            memcpy(&wv, w + j*K_CENTER_FOLD_TILE, sizeof(wv));
            for (int h = 0; h < NH; ++h) {
                acc[h] += c[h][j] * wv;
            }
        }
        k_center_f32x16 m;
        memcpy(&m, mk, sizeof(m));
        for (int h = 0; h < NH; ++h) {
            const k_center_f32x16 v = m + acc[h];
#if defined(__FLT16_MAX__)
            const k_center_f16x16 vh = __builtin_convertvector(v, k_center_f16x16);
            static_assert(sizeof(vh) == K_CENTER_FOLD_TILE*sizeof(ggml_fp16_t), "F16 bits");
            memcpy(e[h], &vh, sizeof(vh));
#else
            memcpy(out, &v, sizeof(v));
            ggml_fp32_to_fp16_row(out, e[h], K_CENTER_FOLD_TILE);
#endif
        }
        return;
    }
#endif
    for (int h = 0; h < NH; ++h) {
        for (int i = 0; i < nr; ++i) {
            float a = 0.0f;
            for (int64_t j = 0; j < D; ++j) {
                a += c[h][j] * w[j*K_CENTER_FOLD_TILE + i];
            }
            out[i] = mk[i] + a;
        }
        ggml_fp32_to_fp16_row(out, e[h], nr);
    }
}

// c[t][h][j] = scale · (bA[j] q[j, h, t] + s[j] q[partner j, h, t]) for every token and head, bA, s and partner of
// K/V head h / G (G = n_head / n_head_kv; the pair tensor's slices 0, 2, 3), into c (n_tok · n_head · D floats, head-
// major per token): two multiply-adds per value, so each thread computes all of them rather than wait on a barrier
static void k_center_fold_coefs(const ggml_tensor * q, const ggml_tensor * pair, float scale, float * c) {
    const int64_t D = q->ne[0], n_head = q->ne[1], n_tok = q->ne[2], G = n_head / pair->ne[1];
    for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t h = 0; h < n_head; ++h) {
            const float * qh = (const float *) ((const char *) q->data + h*q->nb[1] + t*q->nb[2]);
            const char  * ph = (const char *) pair->data + (h / G)*pair->nb[1];
            const float * bA = (const float *) ph;
            const float * sB = (const float *) (ph + 2*pair->nb[2]);
            const float * pt = (const float *) (ph + 3*pair->nb[2]);
            float * ch = c + (t*n_head + h)*D;
            for (int64_t j = 0; j < D; ++j) {
                ch[j] = scale * (bA[j]*qh[j] + sB[j]*qh[(int64_t) pt[j]]);
            }
        }
    }
}

K_CENTER_FOLD_CLONES
static void k_center_fold_tiles(ggml_tensor * dst, int64_t b0, int64_t b_step, const float * c) {
    const ggml_tensor * w = dst->src[0];
    const ggml_tensor * q = dst->src[1];
    const ggml_tensor * m = dst->src[3];
    const int64_t n_kv = dst->ne[0], n_tok = dst->ne[1], n_head = dst->ne[2], D = q->ne[0];
    constexpr int NH = 8;  // heads per pass: 8 accumulators of 16 cells and one table vector in registers
    ggml_fp16_t * e[NH];
    const float * ch[NH];
    for (int64_t b = b0; b*K_CENTER_FOLD_TILE < n_kv; b += b_step) {
        const int64_t r0 = b*K_CENTER_FOLD_TILE;
        const int     nr = (int) std::min<int64_t>(K_CENTER_FOLD_TILE, n_kv - r0);
        const float * wt = (const float *) ((const char *) w->data + b*w->nb[1]);
        for (int64_t t = 0; t < n_tok; ++t) {
            const float * mk = (const float *) ((const char *) m->data + t*m->nb[1]) + r0;
            if (std::all_of(mk, mk + nr, [](float v) { return v == -INFINITY; })) {
                // a tile the token cannot see (the cache's cells past the last used one: most of them in a short
                // context): -inf for every head, as the sum would give, without the sum
                const ggml_fp16_t minus_inf = ggml_fp32_to_fp16(-INFINITY);
                for (int64_t h = 0; h < n_head; ++h) {
                    std::fill_n((ggml_fp16_t *) ((char *) dst->data + t*dst->nb[1] + h*dst->nb[2]) + r0, nr, minus_inf);
                }
                continue;
            }
            for (int64_t h0 = 0; h0 < n_head; h0 += NH) {
                const int nh = (int) std::min<int64_t>(NH, n_head - h0);
                for (int h = 0; h < nh; ++h) {
                    e[h]  = (ggml_fp16_t *) ((char *) dst->data + t*dst->nb[1] + (h0 + h)*dst->nb[2]) + r0;
                    ch[h] = c + (t*n_head + h0 + h)*D;
                }
                switch (nh) {
                    case 8:  k_center_fold_tile<8>(e, mk, wt, ch, D, nr); break;
                    case 7:  k_center_fold_tile<7>(e, mk, wt, ch, D, nr); break;
                    case 6:  k_center_fold_tile<6>(e, mk, wt, ch, D, nr); break;
                    case 5:  k_center_fold_tile<5>(e, mk, wt, ch, D, nr); break;
                    case 4:  k_center_fold_tile<4>(e, mk, wt, ch, D, nr); break;
                    case 3:  k_center_fold_tile<3>(e, mk, wt, ch, D, nr); break;
                    case 2:  k_center_fold_tile<2>(e, mk, wt, ch, D, nr); break;
                    default: k_center_fold_tile<1>(e, mk, wt, ch, D, nr); break;
                }
            }
        }
    }
}

// the op's scale travels as the bits of the userdata pointer (ggml keeps userdata, not a payload)
static void * k_center_scale_to_ptr(float scale) {
    uint32_t u;
    memcpy(&u, &scale, sizeof(u));
    return (void *) (uintptr_t) u;
}
static float k_center_scale_of_ptr(void * p) {
    const uint32_t u = (uint32_t) (uintptr_t) p;
    float scale;
    memcpy(&scale, &u, sizeof(scale));
    return scale;
}

static void k_center_fold_mask_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const ggml_tensor * q = dst->src[1];
    thread_local std::vector<float> c;
    c.resize((size_t) (q->ne[0]*q->ne[1]*q->ne[2]));
    k_center_fold_coefs(q, dst->src[2], k_center_scale_of_ptr(userdata), c.data());
    k_center_fold_tiles(dst, ith, nth, c.data());
}

ggml_tensor * llama_k_center_fold_mask(ggml_context * ctx, ggml_tensor * table, ggml_tensor * q, ggml_tensor * pair,
                                       ggml_tensor * mask, float scale) {
    const int64_t D = q->ne[0], n_head = q->ne[1], n_tok = q->ne[2], n_kv = mask->ne[0];
    GGML_ASSERT(table->type == GGML_TYPE_F32 && q->type == GGML_TYPE_F32 && pair->type == GGML_TYPE_F32 && mask->type == GGML_TYPE_F32);
    GGML_ASSERT(q->nb[0] == sizeof(float) && pair->nb[0] == sizeof(float) && table->nb[0] == sizeof(float) && mask->nb[0] == sizeof(float));
    GGML_ASSERT(q->ne[3] == 1 && pair->ne[0] == D && pair->ne[1] >= 1 && n_head % pair->ne[1] == 0 && pair->ne[2] == 4);
    GGML_ASSERT(table->ne[0] == K_CENTER_FOLD_TILE*D && table->ne[1]*K_CENTER_FOLD_TILE >= n_kv);
    GGML_ASSERT(mask->ne[1] >= n_tok && mask->ne[2] == 1 && mask->ne[3] == 1);
    ggml_tensor * args[4] = { table, q, pair, mask };
    return ggml_custom_4d(ctx, GGML_TYPE_F16, n_kv, n_tok, n_head, 1, args, 4, k_center_fold_mask_op,
                          GGML_N_TASKS_MAX, k_center_scale_to_ptr(scale));
}
