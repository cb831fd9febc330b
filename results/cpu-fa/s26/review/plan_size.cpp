#include "ggml.h"
#include "ggml-cpu.h"
#include <cstdio>
int main() {
    ggml_init_params ip = { 16*ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true };
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, 4096, 16);
    ggml_tensor * i = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, 16);
    ggml_tensor * d = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4096, 16);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, ggml_set_rows(ctx, d, x, i));
    for (int nth = 2; nth <= 4; nth *= 2) {
        ggml_cplan p = ggml_graph_plan(gf, nth, NULL);
        printf("nth %d: work_size %zu bytes, thread %d uses up to byte %zu\n", nth, p.work_size, nth - 1, (size_t)((4096 + 16)*(nth - 1) + 4096)*4);
    }
}
