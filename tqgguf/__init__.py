"""tqgguf: TurboQuant KV caches for GGUF models (see README.md and docs/ARCHITECTURE.md)."""


def _load_cuda_engine_first() -> None:
    """Import the installed engine before any other extension module when it is a CUDA build.

    The CUDA engine's libggml-cuda carries and exports its own copy of parts of libstdc++.
    When an extension loaded earlier (numpy) has brought in the system libstdc++, libllama's
    tokenizer (std::regex) ends up using both and crashes with SIGSEGV while loading a model
    (seen on the H200 image: numpy 2.5 imported first -> segfault; llama_cpp first -> fine;
    docs/CUDA.md). Loading the engine first keeps one copy in charge. CPU and Metal builds
    are left alone; nothing here raises (a broken install is reported where it is used).
    """
    try:
        from .builder import installed_build_info

        if (installed_build_info() or {}).get("backend") == "cuda":
            import llama_cpp  # noqa: F401
    except Exception:  # noqa: BLE001 - see docstring
        return


_load_cuda_engine_first()
