// tqgguf: Q, K and V rotated in one CPU node (llama-tq-rotate.h).
#include "llama-tq-rotate.h"

#include "llama-model.h"
#include "llama-tq-checks.h"

#include <algorithm>
#include <cmath>

void llama_tq_fwht(float * y, const float * x, int64_t n) {
    const float scale = 1.0f/sqrtf((float) n);
    for (int64_t j = 0; j < n; ++j) {
        y[j] = x[j]*scale;
    }
    for (int64_t len = 1; len < n; len <<= 1) {
        for (int64_t i = 0; i < n; i += 2*len) {
            float * a = y + i;
            float * b = y + i + len;
            for (int64_t j = 0; j < len; ++j) {
                const float u = a[j];
                const float w = b[j];
                a[j] = u + w;
                b[j] = u - w;
            }
        }
    }
}

static void tq_rotate_qkv_op(ggml_tensor * dst, int ith, int nth, void * /*userdata*/) {
    const ggml_tensor * src[3] = { dst->src[0], dst->src[1], dst->src[2] };
    const int64_t n_grp[3] = { dst->src[3]->ne[0], dst->src[3]->ne[0], dst->src[4]->ne[0] };
    const int64_t D     = dst->ne[0];
    const int64_t heads = dst->ne[1];
    const int64_t nrows = heads*dst->ne[2];
    const int64_t per   = (nrows + nth - 1)/nth;
    const int64_t r0 = std::min(nrows, ith*per), r1 = std::min(nrows, r0 + per);
    const int64_t h_k = src[0]->ne[1], h_v = h_k + src[1]->ne[1];
    for (int64_t r = r0; r < r1; ++r) {
        const int64_t t = r / heads, h = r % heads;
        const int s = h < h_k ? 0 : h < h_v ? 1 : 2;
        const int64_t hs = s == 0 ? h : s == 1 ? h - h_k : h - h_v;
        const float * x = (const float *) ((const char *) src[s]->data + hs*src[s]->nb[1] + t*src[s]->nb[2]);
        float * y = (float *) ((char *) dst->data + h*dst->nb[1] + t*dst->nb[2]);
        const int64_t n = n_grp[s];
        for (int64_t g = 0; g < D; g += n) {
            llama_tq_fwht(y + g, x + g, n);
        }
    }
}

ggml_tensor * llama_tq_rotate_qkv(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v,
                                  ggml_tensor * rot_k, ggml_tensor * rot_v) {
    const int64_t D = q->ne[0];
    for (ggml_tensor * t : { q, k, v }) {
        GGML_ASSERT(t->type == GGML_TYPE_F32 && t->ne[0] == D && t->nb[0] == sizeof(float) && t->ne[2] == q->ne[2] && t->ne[3] == 1);
    }
    for (ggml_tensor * r : { rot_k, rot_v }) {
        const int64_t n = r->ne[0];
        GGML_ASSERT(n > 0 && (n & (n - 1)) == 0 && D % n == 0);
    }
    ggml_tensor * args[5] = { q, k, v, rot_k, rot_v };
    return ggml_custom_4d(ctx, GGML_TYPE_F32, D, q->ne[1] + k->ne[1] + v->ne[1], q->ne[2], 1, args, 5,
                          tq_rotate_qkv_op, GGML_N_TASKS_MAX, nullptr);
}

ggml_tensor * llama_tq_rotated_part(ggml_context * ctx, ggml_tensor * qkv, ggml_tensor * q, ggml_tensor * k, int part) {
    GGML_ASSERT(part >= 0 && part <= 2);
    const int64_t h0 = part == 0 ? 0 : part == 1 ? q->ne[1] : q->ne[1] + k->ne[1];
    const int64_t nh = part == 0 ? q->ne[1] : part == 1 ? k->ne[1] : qkv->ne[1] - h0;
    return ggml_view_3d(ctx, qkv, qkv->ne[0], nh, qkv->ne[2], qkv->nb[1], qkv->nb[2], h0*qkv->nb[1]);
}

bool llama_tq_rotate_one_node_ok(const llama_model & model, const std::vector<uint32_t> & layer_ids,
                                 const std::function<ggml_backend_buffer_type_t(uint32_t)> & buft_of) {
    if (!llama_tq_env_bool("LLAMA_TQ_ROT_ONE_NODE", true)) {
        return false;
    }
    for (const uint32_t il : layer_ids) {
        if (!ggml_backend_buft_is_host(buft_of(il)) || ggml_backend_dev_type(model.dev_layer(il)) != GGML_BACKEND_DEVICE_TYPE_CPU) {
            return false;
        }
    }
    return true;
}
