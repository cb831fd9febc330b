"""One llama-server process: its command line, start, readiness, log, stop.

``tqgguf serve`` runs llama.cpp's own server (built from the same patched tree by
``tqgguf build``) as a child on a private loopback port and fronts it (see ``app``).
This module knows nothing about HTTP routes; ``manager`` decides when a child starts or
stops, and ``runner`` restarts one that crashed.

No orphans: the child is started with ``PR_SET_PDEATHSIG`` (Linux), so it gets SIGKILL
if tqgguf dies without stopping it (not SIGTERM: llama-server's SIGTERM handler takes a
lock and was seen to hang there, blocked, as an orphan), and :meth:`Child.stop` sends
SIGTERM, then SIGKILL after a grace period.
"""
from __future__ import annotations

import asyncio
import ctypes
import errno
import logging
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import aiohttp

LOOPBACK = "127.0.0.1"
#: Seconds a model may take to load before the start counts as failed.
LOAD_TIMEOUT_S = 600.0
#: Seconds between SIGTERM and SIGKILL when stopping a child (an unload or a reload, once its
#: requests have finished).
STOP_GRACE_S = 10.0
#: The same when ``tqgguf serve`` itself shuts down, after its requests' grace period: an idle
#: llama-server exits ~35 ms after SIGTERM, but one in the middle of long prefills ignores it
#: until its batches are done (three 6k-token prompts, q8_0/turbo4 on 2 CPU cores: still running
#: 30 s after SIGTERM), which held the shutdown for the whole STOP_GRACE_S. Nothing is lost by
#: killing it then: its requests have been answered with the shutdown's error.
SHUTDOWN_STOP_S = 0.5

#: The media marker of every child started with ``--mmproj`` (``LLAMA_MEDIA_MARKER`` in its
#: environment; llama-server's own is random per process): where a ``/completion`` prompt
#: object's text puts each image of its ``multimodal_data``. Random per tqgguf process, as
#: llama-server's, so that a prompt cannot contain it by chance.
MEDIA_MARKER = f"<__media_{secrets.token_hex(8)}__>"

#: llama-server's ``-b`` when none is given (``common_params::n_batch``, llama.cpp common/common.h);
#: the context clamps it (``cparams.n_batch = min(n_ctx, n_batch)``, src/llama-context.cpp).
LLAMA_DEFAULT_N_BATCH = 2048

#: Set in every child's environment. CORS is the front's (``app``: Ollama's origins and
#: ``OLLAMA_ORIGINS``); the child sits on loopback behind it, which passes no Origin header on
#: and no Access-Control header back. "localhost" makes llama-server reflect loopback origins
#: only, so it does not warn at every start that "CORS allows all origins" (its default, "*").
#: An environment variable rather than ``--cors-origins``: a llama-server from before that
#: option (``TQGGUF_LLAMA_SERVER``) ignores it instead of refusing to start.
CHILD_ENV = {"LLAMA_ARG_CORS_ORIGINS": "localhost"}

log = logging.getLogger("tqgguf.llama-server")

# llama.cpp's common init logs the CPU threads it runs with: "llama threadpool init, n_threads = 4"
_THREADS_LINE = re.compile(r"threadpool init, n_threads = (\d+)")


#: llama-server reads each of its flags from a variable as well (``LLAMA_ARG_CTX_SIZE`` for ``-c``, ...,
#: common/arg.cpp ``set_env``; a flag on the command line wins, with a warning), and the child inherits
#: tqgguf's environment. Those variables that would cut the front off from its own child are refused:
#: name -> why.
CHILD_ENV_PREFIX = "LLAMA_ARG_"
REFUSED_CHILD_ENV = {
    "LLAMA_API_KEY": "llama-server would demand this key from tqgguf serve's own requests to it (401)",
    "LLAMA_ARG_API_KEY_FILE": "llama-server would demand a key from tqgguf serve's own requests to it (401)",
    "LLAMA_ARG_SSL_KEY_FILE": "llama-server would speak HTTPS, and tqgguf serve reaches it over plain HTTP",
    "LLAMA_ARG_SSL_CERT_FILE": "llama-server would speak HTTPS, and tqgguf serve reaches it over plain HTTP",
    "LLAMA_ARG_API_PREFIX": "llama-server's routes would move under the prefix, where tqgguf serve does not look",
}


def child_env_args(environ: dict[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that llama-server reads as flags (``LLAMA_ARG_*``, and
    ``LLAMA_API_KEY``), sorted by name: they reach every child unless refused
    (:func:`check_child_env`)."""
    return {k: environ[k] for k in sorted(environ) if k.startswith(CHILD_ENV_PREFIX) or k in REFUSED_CHILD_ENV}


def check_child_env(environ: dict[str, str]) -> None:
    """Raise ValueError naming each variable of :data:`REFUSED_CHILD_ENV` set in ``environ``,
    and why it cannot be used (unset it; serve has its own settings for what it supports)."""
    bad = [k for k in child_env_args(environ) if k in REFUSED_CHILD_ENV]
    if bad:
        raise ValueError("; ".join(f"{k} is set, but {REFUSED_CHILD_ENV[k]}" for k in bad)
                         + ": unset it (the variables llama-server reads reach tqgguf serve's child; this one "
                           "would break the connection to it)")


class ChildError(RuntimeError):
    """llama-server did not start or died; the message carries its last log lines."""


@dataclass(frozen=True)
class DraftSpec:
    """The draft model of a child's speculative decoding, as llama-server's flags take it.

    model: GGUF path (``-md``); ctk/ctv: its K/V cache types (``-ctkd``/``-ctvd``, ggml
    names, turbo types included); spec_type: ``--spec-type`` (a comma list, e.g.
    "draft-simple": llama-server loads a ``-md`` model but drafts with it only when a
    draft type is named); n_gpu_layers: ``-ngld`` (-1: all; None: not passed, llama-server's
    auto); n_max/n_min: ``--spec-draft-n-max``/``--spec-draft-n-min`` (None: llama-server's
    defaults, 3 and 0).
    """

    model: Path
    ctk: str = "f16"
    ctv: str = "f16"
    spec_type: str = "draft-simple"
    n_gpu_layers: int | None = None
    n_max: int | None = None
    n_min: int | None = None

    def argv(self) -> list[str]:
        """The flags for llama-server."""
        a = ["-md", str(self.model), "-ctkd", self.ctk, "-ctvd", self.ctv, "--spec-type", self.spec_type]
        if self.n_gpu_layers is not None:
            a += ["-ngld", "all" if self.n_gpu_layers < 0 else str(self.n_gpu_layers)]
        if self.n_max is not None:
            a += ["--spec-draft-n-max", str(self.n_max)]
        if self.n_min is not None:
            a += ["--spec-draft-n-min", str(self.n_min)]
        return a


@dataclass
class ChildSpec:
    """What one llama-server child runs.

    binary: the llama-server executable; model: GGUF path; alias: the model name it
    reports; n_ctx: context per slot in tokens (llama-server's ``-c`` is the total over
    ``-np`` slots, so ``-c n_ctx*n_parallel`` is passed); n_parallel: ``-np``; ctk/ctv:
    ggml cache type names; flash_attn: on/off/auto; n_gpu_layers: ``-ngl`` (-1: all layers; None:
    llama-server's own default, as many layers as fit, ``-fit on``); offload_args: the split
    flags (``--rpc``, ``-sm``, ``-ts``, ``-mg``, ``-dev``) as llama-server takes them; n_threads:
    ``-t`` (None: llama-server's default, every core); n_batch: ``-b`` (None: llama-server's
    default, :data:`LLAMA_DEFAULT_N_BATCH`); use_mmap: False passes ``-lm none`` (no mmap); embedding:
    an embeddings-only child (``--embeddings``, mean pooling when the model declares none,
    one slot, the whole context in one batch); rerank: an embeddings child of a reranking model
    (``--pooling rank``, which llama-server's rerank routes need); env: variables added to the child's environment (the engine's
    switches: rotation, K centering); port: the loopback port (0: pick a free one); draft: the draft
    model of speculative decoding (:class:`DraftSpec`, None: none; never for an embeddings child);
    spec_type: ``--spec-type`` without a draft model (ngram-*, draft-mtp; None: none); mmproj: the
    multimodal projector GGUF (``--mmproj``; None: text only; never for an embeddings child).
    """

    binary: Path
    model: Path
    alias: str
    n_ctx: int
    n_parallel: int = 1
    ctk: str = "f16"
    ctv: str = "f16"
    flash_attn: str = "auto"
    n_gpu_layers: int | None = 0
    offload_args: list[str] = field(default_factory=list)
    n_threads: int | None = None
    n_batch: int | None = None
    use_mmap: bool = True
    embedding: bool = False
    model_pooling: bool = False
    rerank: bool = False
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    draft: DraftSpec | None = None
    spec_type: str | None = None
    mmproj: Path | None = None

    def argv(self, port: int) -> list[str]:
        """The llama-server command line for ``port`` (flags as llama.cpp names them)."""
        a = [str(self.binary), "-m", str(self.model), "--host", LOOPBACK, "--port", str(port), "-a", self.alias,
             "-ctk", self.ctk, "-ctv", self.ctv, "-fa", self.flash_attn]
        if self.n_gpu_layers is None:  # llama-server's default: -ngl auto, fitted to the devices' memory
            a += ["-fit", "on"]
        else:
            a += ["-ngl", "all" if self.n_gpu_layers < 0 else str(self.n_gpu_layers), "-fit", "off"]
        # -lv 4: llama-server shows the library's own load lines (devices, layers offloaded, model and
        # KV buffers per device) only at debug verbosity; serve's startup placement is read from them
        # (about 190 lines at load, 33 per request, logged at debug level unless -v)
        a += [*self.offload_args, "-lv", "4", "--no-webui", "--metrics", "--jinja"]
        if self.embedding:
            # embeddings need the whole input in one ubatch; one slot is enough for them
            a += ["-c", str(self.n_ctx), "-np", "1", "-b", str(self.n_ctx), "-ub", str(self.n_ctx), "--embeddings"]
            if self.rerank:
                a += ["--pooling", "rank"]
            elif not self.model_pooling:
                a += ["--pooling", "mean"]
        else:
            a += ["-c", str(self.n_ctx * self.n_parallel), "-np", str(self.n_parallel)]
            # as Ollama runs llama-server (appendContextShiftArgs in Ollama's llm/llama_server.go): a
            # generation that reaches the end of the slot's context drops the older half of the tokens after
            # n_keep and goes on; llama-server's own default is off (it stops with finish_reason length)
            a += ["--context-shift"]
            if self.n_batch:
                a += ["-b", str(self.n_batch)]
            if self.draft is not None:
                a += self.draft.argv()
            elif self.spec_type:
                a += ["--spec-type", self.spec_type]
            if self.mmproj is not None:
                a += ["--mmproj", str(self.mmproj)]
        if not self.use_mmap:
            # Ollama's use_mmap false: read the model into memory instead of mapping it. This llama-server has no
            # --no-mmap; its -lm/--load-mode "none" is that (llama_model_loader: use_mmap only for auto, mmap,
            # mmap+mlock; "dio" is direct I/O, "mlock" locks it in RAM as well)
            a += ["-lm", "none"]
        if self.n_threads:
            a += ["-t", str(self.n_threads)]
        return a


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on ``host`` that nothing listens on right now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_free(port: int, host: str = LOOPBACK) -> bool:
    """True when ``port`` on ``host`` can be bound now."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def gpu_devices(binary: Path) -> list[str]:
    """The GPU devices ``binary --list-devices`` lists (llama-server / llama-cli), one line
    each; empty for a CPU-only build or when no driver / ``CUDA_VISIBLE_DEVICES`` hides them.
    Raises OSError or subprocess.TimeoutExpired when it cannot be run."""
    out = subprocess.run([str(binary), "--list-devices"], capture_output=True, text=True, timeout=60).stdout
    # "Available devices:" then one indented line per device, "  (none)" when there is none
    listing = out.split("Available devices:", 1)[-1]
    return [ln.strip() for ln in listing.splitlines() if ln.strip() and ln.strip() != "(none)"]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: nothing to shut down gracefully for
    os.setpgrp()  # the terminal's Ctrl-C goes to tqgguf, which stops the child itself


def describe_exit(code: int | None) -> str:
    """'exit 1' / 'killed by SIGKILL' / 'running' for a Popen return code."""
    if code is None:
        return "running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


class Child:
    """A running llama-server. Start with :meth:`start` (from the thread that stays alive,
    e.g. the event loop's: the death signal follows the starting thread), then await
    :meth:`wait_ready`.

    Args:
        spec: ChildSpec.
        name: label for log lines (the model alias).
        on_line: called with each log line (default: the ``tqgguf.llama-server`` logger).
    """

    def __init__(self, spec: ChildSpec, name: str, on_line: Callable[[str], None] | None = None):
        self.spec = spec
        self.name = name
        self.port = spec.port
        self.proc: subprocess.Popen | None = None
        self.tail: deque[str] = deque(maxlen=60)
        self.stopping = False
        self.started_at = 0.0
        self.ready_seconds: float | None = None
        self.n_threads: int | None = spec.n_threads  # what it runs with: -t, else read from its log
        self._on_line = on_line or (lambda line: log.info("[%s] %s", self.name, line))
        self._reader: threading.Thread | None = None
        # set when the reader has passed llama-server's "model loaded" line: every load line (KV
        # caches, placement) has been seen; /health can answer 200 while the reader, a thread on
        # a busy machine, is still behind
        self.load_read = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def start(self) -> None:
        """Spawn the process. Raises ChildError when the binary cannot be run or a fixed
        port (``spec.port``) is taken."""
        if self.spec.port:
            if not port_free(self.spec.port):
                raise ChildError(f"llama-server's port {self.spec.port} on {LOOPBACK} is already in use; "
                                 "choose another with TQGGUF_LLAMA_SERVER_PORT or leave it unset (a free port "
                                 "is picked)")
            self.port = self.spec.port
        else:
            self.port = free_port()
        env = {**os.environ, **self.spec.env, **CHILD_ENV}
        if self.spec.mmproj is not None:
            env["LLAMA_MEDIA_MARKER"] = MEDIA_MARKER
        argv = self.spec.argv(self.port)
        log.debug("starting: %s", " ".join(argv))
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent)
        except OSError as e:
            raise ChildError(f"cannot run llama-server {self.spec.binary}: {e.strerror}; run `tqgguf build` "
                             "or point TQGGUF_LLAMA_SERVER at a working binary") from None
        self.started_at = time.monotonic()
        self._reader = threading.Thread(target=self._read, name=f"llama-server-log-{self.name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", errors="replace").rstrip()
            if not line:
                continue
            self.tail.append(line)
            if self.n_threads is None and (m := _THREADS_LINE.search(line)):
                self.n_threads = int(m.group(1))
            try:
                self._on_line(line)
            except Exception:  # noqa: BLE001 - a logging problem must not stop the reader
                pass
            if line.endswith(": model loaded"):  # llama-server's (tools/server/server.cpp) last load line
                self.load_read.set()
        self.load_read.set()  # the process ended: nothing more will come

    def last_lines(self, n: int = 8) -> list[str]:
        """This child's own last ``n`` log lines, oldest first (all that the reader has
        seen; after :meth:`wait_exit` that is everything the process wrote)."""
        return list(self.tail)[-n:]

    def failure(self) -> str:
        """Why the child is not serving: its exit and its last log lines. The last lines and
        nothing else: llama-server ends a refused load with its reasons ("failed to load
        model", "exiting due to model loading error"), and a line picked by its level or
        wording from further back would be one from before the failure."""
        shown = self.last_lines()
        return f"llama-server ({describe_exit(self.returncode())}): " + (" | ".join(shown) if shown else "no output")

    async def wait_ready(self, timeout: float = LOAD_TIMEOUT_S) -> float:
        """Poll ``/health`` until it answers 200; returns the seconds since start.

        Raises ChildError with llama-server's own message when it exits first (a model it
        refuses, a port it cannot bind), or when ``timeout`` passes (the child is stopped).
        """
        deadline = self.started_at + timeout
        async with aiohttp.ClientSession(base_url=self.base_url, timeout=aiohttp.ClientTimeout(total=5)) as client:
            while True:
                if self.returncode() is not None:
                    await asyncio.to_thread(self._join_reader)
                    raise ChildError(self.failure())
                try:
                    async with client.get("/health") as r:
                        if r.status == 200:
                            self.ready_seconds = time.monotonic() - self.started_at
                            await asyncio.to_thread(self.load_read.wait, 5.0)  # its load lines are read
                            return self.ready_seconds
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    pass
                if time.monotonic() > deadline:
                    await self.stop()
                    raise ChildError(f"llama-server did not become ready within {timeout:.0f} s; "
                                     + self.failure())
                await asyncio.sleep(0.05)

    def _join_reader(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=2)

    async def wait_exit(self) -> int:
        """Wait until the process exits; returns its return code."""
        assert self.proc is not None
        code = await asyncio.to_thread(self.proc.wait)
        await asyncio.to_thread(self._join_reader)
        return code

    async def stop(self, grace: float = STOP_GRACE_S) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; returns when the process is gone."""
        self.stopping = True
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            await asyncio.wait_for(asyncio.to_thread(self.proc.wait), grace)
        except asyncio.TimeoutError:
            log.info("[%s] llama-server (pid %d) still running %.1f s after SIGTERM: killed", self.name, self.proc.pid,
                     grace)
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait)
        except asyncio.CancelledError:
            # never leave a child that ignores SIGTERM behind a waiting thread (the event loop's
            # executor would wait for that thread at exit, forever)
            self.proc.kill()
            raise

    def kill_now(self) -> None:
        """Synchronous SIGKILL (last resort at interpreter exit)."""
        self.stopping = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
