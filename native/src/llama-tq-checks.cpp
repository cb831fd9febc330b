// tqgguf: clear refusals for bad KV cache input (see llama-tq-checks.h, include/llama-tq.h).

#include "llama-tq-checks.h"
#include "llama-tq.h"

#include "llama-impl.h"
#include "llama-io.h"
#include "llama-model.h"
#include "llama-context.h"
#include "llama-graph.h"

#include "ggml.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <vector>

// ---------------------------------------------------------------------------------------
// error lines per thread

static constexpr size_t TQ_MAX_ERRORS = 16;

static thread_local std::vector<std::string> tq_errors;
static thread_local std::string              tq_errors_joined;

void llama_tq_note_error(const char * text) {
    if (!text || tq_errors.size() >= TQ_MAX_ERRORS) {
        return;
    }
    std::string s(text);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) {
        s.pop_back();
    }
    if (!s.empty()) {
        tq_errors.push_back(std::move(s));
    }
}

const char * llama_tq_errors(void) {
    tq_errors_joined.clear();
    for (size_t i = 0; i < tq_errors.size(); ++i) {
        tq_errors_joined += (i ? "\n" : "") + tq_errors[i];
    }
    return tq_errors_joined.c_str();
}

void llama_tq_clear_errors(void) {
    tq_errors.clear();
}

// ---------------------------------------------------------------------------------------
// KV cache types

// the types -ctk/-ctv accept (upstream common/arg.cpp's list + the turbo types)
static const ggml_type TQ_KV_TYPES[] = {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
    GGML_TYPE_IQ4_NL, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_TURBO4_0, GGML_TYPE_TURBO3_0, GGML_TYPE_TURBO2_0,
};

const char * llama_tq_kv_type_names(void) {
    static const std::string names = [] {
        std::string s;
        for (ggml_type t : TQ_KV_TYPES) {
            s += (s.empty() ? "" : ", ") + std::string(ggml_type_name(t));
        }
        return s;
    }();
    return names.c_str();
}

static std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return (char) std::tolower(c); });
    return s;
}

static std::string trim(const std::string & s) {
    const size_t b = s.find_first_not_of(" \t\r\n");
    const size_t e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

int32_t llama_tq_kv_type_from_name(const char * name) {
    if (!name) {
        return -1;
    }
    const std::string want = lower(trim(name));
    for (ggml_type t : TQ_KV_TYPES) {
        if (want == ggml_type_name(t)) {
            return (int32_t) t;
        }
    }
    return -1;
}

static bool is_kv_type(int t) {
    return std::find(std::begin(TQ_KV_TYPES), std::end(TQ_KV_TYPES), (ggml_type) t) != std::end(TQ_KV_TYPES);
}

// "" or why the id cannot be a KV cache type
static std::string check_type_id(const char * side, int t) {
    if (t < 0 || t >= GGML_TYPE_COUNT) {
        return format("%s cache type id %d is not a ggml type (ids 0 to %d in this build); allowed KV cache "
                      "types: %s (by name; tqgguf's ids come from ggml_type_name, other forks number them "
                      "differently)", side, t, GGML_TYPE_COUNT - 1, llama_tq_kv_type_names());
    }
    if (ggml_blck_size((ggml_type) t) == 0) {
        return format("%s cache type id %d is a removed ggml type; allowed KV cache types: %s", side, t,
                      llama_tq_kv_type_names());
    }
    if (!is_kv_type(t)) {
        return format("%s cache type %s (id %d) is not a KV cache type; allowed: %s", side,
                      ggml_type_name((ggml_type) t), t, llama_tq_kv_type_names());
    }
    return "";
}

std::string llama_tq_check_context_params(const llama_model & model, const llama_context_params & params) {
    for (const auto & [side, t] : { std::pair<const char *, int>{ "K", (int) params.type_k },
                                    std::pair<const char *, int>{ "V", (int) params.type_v } }) {
        std::string err = check_type_id(side, t);
        if (!err.empty()) {
            return err;
        }
    }
    // A row of a quantized cache holds whole blocks, and attention views one head of it:
    // a head that starts inside a block has no valid view (ggml_view asserts) or, when the
    // byte offset happens to fit, reads the wrong bytes (NaN logits). So every head dim
    // must be a multiple of the block size, with flash attention on or off.
    const llama_hparams & hp = model.hparams;
    for (const auto & [side, t] : { std::pair<char, ggml_type>{ 'k', params.type_k },
                                    std::pair<char, ggml_type>{ 'v', params.type_v } }) {
        const int64_t blck = ggml_blck_size(t);
        if (blck <= 1) {
            continue;
        }
        for (uint32_t il = 0; il < hp.n_layer(); ++il) {
            if (!hp.has_kv(il)) {
                continue;
            }
            const uint32_t head = side == 'k' ? hp.n_embd_head_k(il) : hp.n_embd_head_v(il);
            if (head % blck != 0) {
                return format("%c cache type %s with block size %lld does not fit this model: n_embd_head_%c = %u "
                              "(layer %u) is not a multiple of %lld, so a head would start inside a block (with "
                              "flash attention on or off); use a type whose block size divides %u (f16, bf16, "
                              "f32: 1; q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl: 32; turbo4, turbo3, turbo2: 64)",
                              side == 'k' ? 'K' : 'V', ggml_type_name(t), (long long) blck, side, head, il,
                              (long long) blck, head);
            }
        }
    }
    return "";
}

// ---------------------------------------------------------------------------------------
// boolean engine variables

bool llama_tq_env_bool(const char * name, bool dflt) {
    const char * raw = getenv(name);
    if (!raw) {
        return dflt;
    }
    const std::string v = lower(trim(raw));
    if (v.empty()) {
        return dflt;
    }
    if (v == "1" || v == "true" || v == "yes" || v == "on") {
        return true;
    }
    if (v == "0" || v == "false" || v == "no" || v == "off") {
        return false;
    }
    throw std::runtime_error(format("%s='%s' is not a boolean; allowed: 1/0, true/false, yes/no, on/off "
                                    "(or unset)", name, raw));
}

// ---------------------------------------------------------------------------------------
// state signatures

static constexpr uint32_t TQ_SIG_MAGIC   = 0x564b5154; // "TQKV"
static constexpr uint32_t TQ_SIG_VERSION = 1;

uint64_t llama_tq_fnv1a(const void * data, size_t n, uint64_t h) {
    const unsigned char * p = (const unsigned char *) data;
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

std::string llama_kv_signature::serialize() const {
    return format("type_k=%s\ntype_v=%s\nrot_k=%s\nrot_v=%s\nk_center=%s\nhead_k=%d\nhead_v=%d\nv_trans=%d\nn_layer=%u\n",
                  type_k.c_str(), type_v.c_str(), rot_k ? "on" : "off", rot_v ? "on" : "off", k_center.c_str(),
                  head_k, head_v, v_trans ? 1 : 0, n_layer);
}

static std::map<std::string, std::string> parse_lines(const std::string & text) {
    std::map<std::string, std::string> out;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) {
            end = text.size();
        }
        const std::string line = text.substr(pos, end - pos);
        const size_t eq = line.find('=');
        if (eq != std::string::npos) {
            out[line.substr(0, eq)] = line.substr(eq + 1);
        }
        pos = end + 1;
    }
    return out;
}

void llama_kv_signature_write(llama_io_write_i & io, const llama_kv_signature & sig) {
    io.write(&TQ_SIG_MAGIC, sizeof(TQ_SIG_MAGIC));
    io.write(&TQ_SIG_VERSION, sizeof(TQ_SIG_VERSION));
    io.write_string(sig.serialize());
}

void llama_kv_signature_check(llama_io_read_i & io, const llama_kv_signature & mine) {
    uint32_t magic = 0;
    io.read(&magic, sizeof(magic));
    if (magic != TQ_SIG_MAGIC) {
        throw std::runtime_error("the state carries no KV cache signature (saved by a llama.cpp build without "
                                 "tqgguf's state checks?); it is refused because its cache types, rotation and "
                                 "K centering cannot be checked against this context");
    }
    uint32_t version = 0;
    io.read(&version, sizeof(version));
    if (version != TQ_SIG_VERSION) {
        throw std::runtime_error(format("the state's KV cache signature has version %u; this build reads version %u",
                                        version, TQ_SIG_VERSION));
    }
    uint32_t len = 0;
    io.read(&len, sizeof(len));
    if (len > 4096) {
        throw std::runtime_error(format("the state's KV cache signature is %u bytes long (at most 4096): a corrupt state", len));
    }
    std::string text(len, '\0');
    if (len) {
        io.read(text.data(), len);
    }
    const auto have = parse_lines(text);
    const auto want = parse_lines(mine.serialize());

    static const std::pair<const char *, const char *> LABELS[] = {
        { "type_k",   "K cache type" },
        { "type_v",   "V cache type" },
        { "rot_k",    "K rotation (Hadamard; LLAMA_ATTN_ROT_DISABLE)" },
        { "rot_v",    "V rotation (Hadamard; LLAMA_ATTN_ROT_DISABLE)" },
        { "k_center", "K centering (LLAMA_K_CENTER)" },
        { "head_k",   "K head dim (another model?)" },
        { "head_v",   "V head dim (another model?)" },
        { "v_trans",  "V layout (1 = transposed: flash attention off)" },
        { "n_layer",  "KV cache layers (another model?)" },
    };
    std::string diffs;
    for (const auto & [key, label] : LABELS) {
        const auto h = have.find(key);
        const std::string hv = h == have.end() ? std::string("(not recorded)") : h->second;
        const std::string & wv = want.at(key);
        if (hv != wv) {
            diffs += format("%s%s: state has %s, context has %s", diffs.empty() ? "" : "; ", label, hv.c_str(), wv.c_str());
        }
    }
    if (!diffs.empty()) {
        throw std::runtime_error("the state was saved with other KV cache settings: " + diffs);
    }
}

static bool llama_tq_is_turbo(ggml_type t) {
    return t == GGML_TYPE_TURBO4_0 || t == GGML_TYPE_TURBO3_0 || t == GGML_TYPE_TURBO2_0;
}

std::string llama_tq_check_fa_placement(llama_context & ctx, const llama_model & model,
        const llama_memory_context_i * mctx, uint32_t n_seqs) {
    if (model.devices.empty()) {
        return "";  // no GPU in use: every layer and its attention are on the CPU; no extra graph to reserve
    }
    if (!ctx.graph_reserve(n_seqs, n_seqs, n_seqs, mctx, true)) {
        return "could not reserve the graph that checks where flash attention runs";
    }
    for (const auto & node : ctx.get_gf_res_reserve()->get_fused_nodes()) {
        if (node.op != LLM_FUSED_OP_FLASH_ATTN || node.il < 0) {
            continue;
        }
        const ggml_tensor * q = node.tensor->src[0];
        const ggml_tensor * k = node.tensor->src[1];
        const ggml_tensor * v = node.tensor->src[2];
        if (!k || !v || (!llama_tq_is_turbo(k->type) && !llama_tq_is_turbo(v->type))) {
            continue;  // other cache types keep upstream's behaviour
        }
        ggml_backend_t backend = ggml_backend_sched_get_tensor_backend(ctx.get_sched(), node.tensor);
        ggml_backend_dev_t dev_fa    = backend ? ggml_backend_get_device(backend) : nullptr;
        ggml_backend_dev_t dev_layer = model.dev_layer(node.il);
        if (dev_fa != dev_layer) {
            return std::string("flash attention with K cache ") + ggml_type_name(k->type) + " and V cache " +
                ggml_type_name(v->type) + " (layer " + std::to_string(node.il) + ", head dims K " +
                std::to_string(k->ne[0]) + " / V " + std::to_string(v->ne[0]) + ", " +
                std::to_string(q ? q->ne[2] : -1) + " query heads on " + std::to_string(k->ne[2]) +
                " KV heads) has no kernel on " + (dev_layer ? ggml_backend_dev_name(dev_layer) : "none") +
                ", which holds the layer; it would run on " + (dev_fa ? ggml_backend_dev_name(dev_fa) : "none") +
                " instead. Refused rather than moved: use a K/V pair that backend has (tqgguf info lists them), " +
                "or keep these layers off the GPU (-ngl)";
        }
    }
    return "";
}
