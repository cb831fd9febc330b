// tqgguf: per-layer K/V cache types (see llama-tq-plan.h).

#include "llama-tq-plan.h"

#include "llama-hparams.h"
#include "llama-impl.h"
#include "llama-tq.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <tuple>

static const char * const KV_PLAN_FORMS =
    "ENTRY[;ENTRY...] with ENTRY = SELECTOR:K/V, SELECTOR = swa or layer ranges N or A-B joined by commas "
    "(e.g. 0-1,22-23:q8_0/q8_0;swa:f16/f16)";

static std::string plan_trim(const std::string & s) {
    const size_t b = s.find_first_not_of(" \t\r\n");
    const size_t e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

static std::vector<std::string> plan_split(const std::string & s, char sep) {
    std::vector<std::string> out;
    size_t start = 0;
    while (true) {
        const size_t p = s.find(sep, start);
        out.push_back(plan_trim(s.substr(start, p == std::string::npos ? std::string::npos : p - start)));
        if (p == std::string::npos) {
            return out;
        }
        start = p + 1;
    }
}

// a layer index: decimal digits only
static bool plan_layer(const std::string & s, uint32_t & out) {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) {
        return false;
    }
    out = (uint32_t) strtoul(s.c_str(), nullptr, 10);
    return true;
}

static ggml_type plan_type(const std::string & name, const std::string & entry, const char * side) {
    const int32_t t = llama_tq_kv_type_from_name(name.c_str());
    if (t < 0) {
        throw std::runtime_error(format("LLAMA_KV_PLAN entry '%s': unknown %s cache type '%s'; allowed: %s",
                                        entry.c_str(), side, name.c_str(), llama_tq_kv_type_names()));
    }
    return (ggml_type) t;
}

llama_kv_plan llama_kv_plan::parse(const char * value) {
    llama_kv_plan plan;
    if (value == nullptr || plan_trim(value).empty()) {
        return plan;
    }
    plan.text = plan_trim(value);
    bool have_swa = false;
    for (const std::string & e : plan_split(plan.text, ';')) {
        if (e.empty()) {
            continue; // a trailing ';'
        }
        const size_t colon = e.rfind(':');
        if (colon == std::string::npos) {
            throw std::runtime_error(format("LLAMA_KV_PLAN entry '%s' has no ':K/V' part; allowed: %s",
                                            e.c_str(), KV_PLAN_FORMS));
        }
        const std::string sel   = plan_trim(e.substr(0, colon));
        const std::string types = plan_trim(e.substr(colon + 1));
        const size_t slash = types.find('/');
        if (slash == std::string::npos || types.find('/', slash + 1) != std::string::npos) {
            throw std::runtime_error(format("LLAMA_KV_PLAN entry '%s': '%s' must be K/V, two cache type names "
                                            "joined by '/' (e.g. q8_0/q8_0); allowed: %s", e.c_str(), types.c_str(),
                                            KV_PLAN_FORMS));
        }
        entry ent;
        ent.type_k = plan_type(plan_trim(types.substr(0, slash)), e, "K");
        ent.type_v = plan_type(plan_trim(types.substr(slash + 1)), e, "V");
        if (sel == "swa") {
            if (have_swa) {
                throw std::runtime_error(format("LLAMA_KV_PLAN: 'swa' is given twice (entry '%s'); give the "
                                                "sliding-window layers one K/V pair", e.c_str()));
            }
            have_swa = true;
            ent.swa  = true;
        } else {
            for (const std::string & r : plan_split(sel, ',')) {
                const size_t dash = r.find('-');
                uint32_t a = 0;
                uint32_t b = 0;
                const bool ok = dash == std::string::npos
                    ? plan_layer(r, a) && (b = a, true)
                    : plan_layer(plan_trim(r.substr(0, dash)), a) && plan_layer(plan_trim(r.substr(dash + 1)), b);
                if (!ok || b < a) {
                    throw std::runtime_error(format("LLAMA_KV_PLAN entry '%s': '%s' is not a layer range; a "
                                                    "selector is 'swa' or layer indices N or A-B (A <= B) joined "
                                                    "by commas; allowed: %s", e.c_str(), r.c_str(), KV_PLAN_FORMS));
                }
                ent.ranges.emplace_back(a, b);
            }
        }
        plan.entries.push_back(std::move(ent));
    }
    // explicit ranges must not overlap (across entries too): each layer gets one pair
    std::vector<std::pair<std::pair<uint32_t, uint32_t>, size_t>> all;
    for (size_t i = 0; i < plan.entries.size(); ++i) {
        for (const auto & r : plan.entries[i].ranges) {
            all.push_back({ r, i });
        }
    }
    std::sort(all.begin(), all.end());
    for (size_t i = 1; i < all.size(); ++i) {
        if (all[i].first.first <= all[i - 1].first.second) {
            throw std::runtime_error(format("LLAMA_KV_PLAN=%s: layer ranges %u-%u and %u-%u overlap; each layer "
                                            "may be named once", plan.text.c_str(),
                                            all[i - 1].first.first, all[i - 1].first.second,
                                            all[i].first.first, all[i].first.second));
        }
    }
    return plan;
}

std::pair<ggml_type, ggml_type> llama_kv_plan::types(uint32_t il, bool is_swa, ggml_type dflt_k, ggml_type dflt_v) const {
    const entry * by_swa = nullptr;
    for (const entry & e : entries) {
        if (e.swa) {
            by_swa = is_swa ? &e : by_swa;
            continue;
        }
        for (const auto & [a, b] : e.ranges) {
            if (il >= a && il <= b) {
                return { e.type_k, e.type_v };
            }
        }
    }
    if (by_swa) {
        return { by_swa->type_k, by_swa->type_v };
    }
    return { dflt_k, dflt_v };
}

void llama_kv_plan::check(const llama_hparams & hp, bool v_trans) const {
    const uint32_t n_layer = hp.n_layer_all;
    for (const entry & e : entries) {
        for (const auto & [a, b] : e.ranges) {
            if (b >= n_layer) {
                throw std::runtime_error(format("LLAMA_KV_PLAN=%s: layer %u is named, but this model has %u layers "
                                                "(0-%u); a plan made for another model does not fit",
                                                text.c_str(), b, n_layer, n_layer - 1));
            }
        }
        if (e.swa && !hp.is_swa_any()) {
            LLAMA_LOG_WARN("%s: LLAMA_KV_PLAN 'swa' entry: this model has no sliding-window layers; it applies to "
                           "none\n", __func__);
        }
    }
    for (uint32_t il = 0; il < n_layer; ++il) {
        if (!hp.has_kv(il)) {
            continue;
        }
        const auto [tk, tv] = types(il, hp.is_swa(il), GGML_TYPE_F16, GGML_TYPE_F16);
        for (const auto & [side, t, head] : { std::tuple<char, ggml_type, uint32_t>{ 'K', tk, hp.n_embd_head_k(il) },
                                              std::tuple<char, ggml_type, uint32_t>{ 'V', tv, hp.n_embd_head_v(il) } }) {
            const int64_t blck = ggml_blck_size(t);
            if (blck > 1 && head % blck != 0) {
                throw std::runtime_error(format("LLAMA_KV_PLAN=%s: layer %u gets %c type %s with block size %lld, "
                                                "which does not divide its head dim %u; use a type whose block "
                                                "size divides %u", text.c_str(), il, side, ggml_type_name(t),
                                                (long long) blck, head, head));
            }
        }
        if (v_trans && ggml_is_quantized(tv)) {
            throw std::runtime_error(format("LLAMA_KV_PLAN=%s: layer %u gets the quantized V type %s, which needs "
                                            "flash attention; enable it (-fa on) or give V f16", text.c_str(), il,
                                            ggml_type_name(tv)));
        }
    }
}

llama_kv_plan llama_kv_plan_from_env(const llama_hparams & hparams, bool v_trans) {
    llama_kv_plan plan = llama_kv_plan::parse(getenv("LLAMA_KV_PLAN"));
    plan.check(hparams, v_trans);
    return plan;
}

// runs of equal values over consecutive entries: "0-1 a, 2-21 b"
template <typename F>
static std::string plan_runs(const std::vector<llama_kv_plan_layer> & layers, F label, const char * sep_il,
                             const char * sep_run) {
    std::string out;
    size_t i = 0;
    while (i < layers.size()) {
        size_t j = i;
        while (j + 1 < layers.size() && label(layers[j + 1]) == label(layers[i]) && layers[j + 1].il == layers[j].il + 1) {
            ++j;
        }
        out += (out.empty() ? "" : sep_run);
        out += layers[i].il == layers[j].il ? format("%u", layers[i].il) : format("%u-%u", layers[i].il, layers[j].il);
        out += sep_il + label(layers[i]);
        i = j + 1;
    }
    return out;
}

static std::string type_name_or_none(ggml_type t) {
    return t == GGML_TYPE_COUNT ? std::string("none") : std::string(ggml_type_name(t));
}

std::string llama_kv_plan_types_label(const std::vector<llama_kv_plan_layer> & layers, bool v) {
    auto label = [v](const llama_kv_plan_layer & l) { return type_name_or_none(v ? l.type_v : l.type_k); };
    bool uniform = true;
    for (const auto & l : layers) {
        uniform = uniform && label(l) == label(layers[0]);
    }
    if (layers.empty()) {
        return "";
    }
    return uniform ? label(layers[0]) : plan_runs(layers, label, ":", ",");
}

void llama_kv_plan_log(const llama_kv_plan & plan, const std::vector<llama_kv_plan_layer> & layers) {
    size_t  bytes  = 0;
    int64_t values = 0;
    for (const auto & l : layers) {
        bytes  += ggml_row_size(l.type_k, l.n_embd_k);
        values += l.n_embd_k;
        if (l.type_v != GGML_TYPE_COUNT) {
            bytes  += ggml_row_size(l.type_v, l.n_embd_v);
            values += l.n_embd_v;
        }
    }
    auto pair = [](const llama_kv_plan_layer & l) { return type_name_or_none(l.type_k) + "/" + type_name_or_none(l.type_v); };
    LLAMA_LOG_INFO("%s: kv_plan = %s: layers %s (%zu layers); %zu bytes per token, %.3f bits/value\n", __func__,
                   plan.text.c_str(), plan_runs(layers, pair, " ", ", ").c_str(), layers.size(), bytes,
                   values ? 8.0 * bytes / values : 0.0);
}
