// tqgguf: C API additions of the patched llama.cpp (exported from libllama).
//
// Refusals the patched engine makes (a KV cache type id that is not a cache type, a head
// dim that is not a multiple of the cache type's block size, a state restored into a
// context with other cache settings, a bad LLAMA_ATTN_ROT_DISABLE) are logged as errors
// and make the call fail (nullptr context, 0 bytes read). The error lines are also kept
// per thread, so a binding can raise with the reason instead of a bare "failed".

#pragma once

#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

    // Error-level log lines (LLAMA_LOG_ERROR) logged on the calling thread since the last
    // llama_tq_clear_errors(), joined by "\n" ("" when there were none). At most 16 lines
    // are kept (the first 16). The pointer stays valid until the next call of either
    // function on this thread.
    LLAMA_API const char * llama_tq_errors(void);
    LLAMA_API void         llama_tq_clear_errors(void);

    // ggml type id of a KV cache type name (case-insensitive: "turbo4", "q8_0", "F16"),
    // or -1 when the name is not one of llama_tq_kv_type_names().
    LLAMA_API int32_t      llama_tq_kv_type_from_name(const char * name);

    // The KV cache types a context accepts for type_k / type_v, comma-separated:
    // "f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1, turbo4, turbo3, turbo2".
    LLAMA_API const char * llama_tq_kv_type_names(void);

#ifdef __cplusplus
}
#endif
