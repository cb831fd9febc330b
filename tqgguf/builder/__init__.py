"""Build the patched llama.cpp engine through the llama-cpp-python sdist.

Never imports ``tqgguf.runtime`` or ``llama_cpp``: the build cannot depend on what it builds.
"""
from .driver import BuildConfig, BuildResult, build, installed_build_info  # noqa: F401
from .source import PIN, PatchError, SourceError  # noqa: F401
