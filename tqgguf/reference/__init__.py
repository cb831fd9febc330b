"""Pure-numpy reference codec for the turbo KV-cache types (bit-exact with native/ggml)."""
