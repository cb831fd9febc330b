// tqgguf: llama.cpp's context shift (K-shift) with a quantized K cache, on any backend — the
// C++ twin of tests/test_k_center.py::test_k_shift_keeps_a_centered_cache_coherent, so the
// GPU can be checked with the same numbers as the CPU (same binary, -ngl 99 or 0).
//
//   kshift-check MODEL.gguf TEXT NGL TYPE_K...      (LLAMA_K_CENTER etc. from the environment)
//
// Per K type: decode 160 tokens of TEXT, drop positions 16..79 and shift the rest back by 64
// (seq_rm + seq_add: the K-shift graph re-applies RoPE, dequantizing and re-quantizing the
// cache), decode 16 more; and decode the same 112 tokens fresh. Prints the mean KL divergence
// of the 16 last log-prob rows against the f16 cache's (shifted against shifted, fresh against
// fresh) and how many of the 16 top-1 tokens agree. The CPU test's acceptance: KLD after the
// shift < 2 x KLD without it + 2e-3, and >= 14/16 top-1 equal.
#include "llama.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

typedef std::vector<std::vector<double>> rows_t;

static rows_t decode(llama_context * ctx, const std::vector<llama_token> & toks, int pos0, int want, int n_vocab) {
    llama_batch b = llama_batch_init((int) toks.size(), 0, 1);
    for (size_t i = 0; i < toks.size(); ++i) {
        b.token[i] = toks[i]; b.pos[i] = pos0 + (int) i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0;
        b.logits[i] = (int) i >= (int) toks.size() - want;
    }
    b.n_tokens = (int) toks.size();
    if (llama_decode(ctx, b) != 0) { fprintf(stderr, "decode failed\n"); exit(1); }
    rows_t out;
    for (int i = (int) toks.size() - want; i < (int) toks.size(); ++i) {
        const float * p = llama_get_logits_ith(ctx, i);
        double mx = -1e300; for (int v = 0; v < n_vocab; ++v) mx = std::max(mx, (double) p[v]);
        double s = 0; for (int v = 0; v < n_vocab; ++v) s += std::exp(p[v] - mx);
        std::vector<double> r(n_vocab); for (int v = 0; v < n_vocab; ++v) r[v] = p[v] - mx - std::log(s);
        out.push_back(r);
    }
    llama_batch_free(b);
    return out;
}

static ggml_type type_by_name(const std::string & n) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char * tn = ggml_type_name((ggml_type) t);
        if (tn && n == tn) return (ggml_type) t;
    }
    fprintf(stderr, "unknown type %s\n", n.c_str()); exit(2);
}

// shifted and fresh log-prob rows for one K type (V f16)
static void run(llama_model * m, const std::vector<llama_token> & toks, ggml_type tk, rows_t & shifted, rows_t & fresh) {
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
    for (int s = 0; s < 2; ++s) {
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = 256; cp.n_batch = 256; cp.n_ubatch = 256; cp.type_k = tk;
        llama_context * ctx = llama_init_from_model(m, cp);
        if (!ctx) { fprintf(stderr, "context failed\n"); exit(1); }
        if (s == 0) {
            decode(ctx, std::vector<llama_token>(toks.begin(), toks.begin() + 160), 0, 1, n_vocab);
            llama_memory_t mem = llama_get_memory(ctx);
            if (!llama_memory_seq_rm(mem, 0, 16, 80)) { fprintf(stderr, "seq_rm failed\n"); exit(1); }
            llama_memory_seq_add(mem, 0, 80, -1, -64);
            shifted = decode(ctx, std::vector<llama_token>(toks.begin() + 160, toks.begin() + 176), 96, 16, n_vocab);
        } else {
            std::vector<llama_token> f(toks.begin(), toks.begin() + 16);
            f.insert(f.end(), toks.begin() + 80, toks.begin() + 176);
            fresh = decode(ctx, f, 0, 16, n_vocab);
        }
        llama_free(ctx);
    }
}

static double kld(const rows_t & a, const rows_t & b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) for (size_t v = 0; v < a[i].size(); ++v) s += std::exp(a[i][v]) * (a[i][v] - b[i][v]);
    return s / a.size();
}

static int top_agree(const rows_t & a, const rows_t & b) {
    int n = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        size_t ia = 0, ib = 0;
        for (size_t v = 1; v < a[i].size(); ++v) { if (a[i][v] > a[i][ia]) ia = v; if (b[i][v] > b[i][ib]) ib = v; }
        n += ia == ib;
    }
    return n;
}

int main(int argc, char ** argv) {
    if (argc < 5) { fprintf(stderr, "usage: %s MODEL TEXT NGL TYPE_K...\n", argv[0]); return 2; }
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = atoi(argv[3]);
    llama_model * m = llama_model_load_from_file(argv[1], mp);
    if (!m) { fprintf(stderr, "model failed\n"); return 1; }
    std::ifstream f(argv[2]); std::stringstream ss; ss << f.rdbuf();
    const std::string text = ss.str().substr(0, 4000);
    std::vector<llama_token> toks(4096);
    const int n = llama_tokenize(llama_model_get_vocab(m), text.c_str(), (int) text.size(), toks.data(), (int) toks.size(), true, false);
    if (n < 200) { fprintf(stderr, "text too short\n"); return 1; }
    toks.resize(200);
    rows_t ref_s, ref_f;
    run(m, toks, GGML_TYPE_F16, ref_s, ref_f);
    printf("ngl %s: f16 shifted vs fresh KLD %.3e\n", argv[3], kld(ref_f, ref_s));
    for (int i = 4; i < argc; ++i) {
        rows_t s, fr;
        run(m, toks, type_by_name(argv[i]), s, fr);
        const double ds = kld(ref_s, s), df = kld(ref_f, fr);
        const int top = top_agree(ref_s, s);
        printf("ngl %s: K-shift %-7s KLD to f16 after the shift %.3e, without shift %.3e; same top-1 after the shift %d/16 -> %s\n",
               argv[3], argv[i], ds, df, top, (ds < 2*df + 2e-3 && top >= 14) ? "PASS" : "FAIL");
    }
    llama_model_free(m);
    return 0;
}
