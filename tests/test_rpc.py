"""Scale-out with ggml RPC: real ``tqgguf rpc-server`` worker processes on loopback, real
``tqgguf ppl`` / ``tqgguf serve`` clients (the openai package for serve), SmolLM2-135M.

- ``tqgguf ppl --rpc a,b`` (the layers split over two workers) gives the local CPU's PPL for
  turbo4/turbo4, q8_0/turbo4 and turbo3/turbo3, and prints where each layer range and its K/V
  cache live;
- a worker killed mid-run ends ppl within 10 s with an error naming it, leaving no process;
- a worker that speaks another protocol, or lacks the turbo types, is refused by name before
  the model loads (those two are small fakes that speak the first steps of ggml's RPC protocol:
  building upstream's own worker here would take longer than the whole suite);
- bad ``--rpc``/``-sm``/``-ts``/``-mg``/``-dev`` values are usage errors (exit 2);
- ``tqgguf serve --rpc`` answers the openai client, answers 503 while its worker is gone, and
  serves again when the worker is back.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tqgguf.variables import VARIABLES

pytestmark = pytest.mark.engine

MODEL = "smollm2-135m"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES or k in ("TQGGUF_CACHE", "TQGGUF_MODELS")}
    env.update(extra)
    return env


def _tq(*args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tqgguf", *args], capture_output=True, text=True, timeout=timeout,
                          env=env or _env())


class Worker:
    """A ``tqgguf rpc-server`` process on a loopback port (started, and listening, on creation)."""

    def __init__(self, port: int | None = None, threads: int = 1):
        self.port = port or _free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "tqgguf", "rpc-server", "-p", str(self.port),
                                      "-t", str(threads)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env())
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}: {self.proc.stdout.read().decode()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("worker did not listen within 60 s") from None
                time.sleep(0.1)
        # that probe connection was one client: the worker must be back at accept() before the next
        time.sleep(0.3)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def workers(require_engine, model_file):
    ws = [Worker(), Worker()]
    yield ws
    for w in ws:
        w.kill()


def _ppl(*args: str, tmp: Path, name: str) -> tuple[dict, str]:
    out = tmp / f"{name}.json"
    r = _tq("ppl", MODEL, "-c", "128", "--chunks", "3", "-t", "2", "--json", str(out), *args)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(out.read_text()), r.stderr


@pytest.mark.parametrize("ctk,ctv", [("turbo4", "turbo4"), ("q8_0", "turbo4"), ("turbo3", "turbo3")])
def test_ppl_through_two_workers_equals_the_local_cpu(workers, tmp_path, ctk, ctv):
    local, _ = _ppl("-ctk", ctk, "-ctv", ctv, "-ngl", "0", tmp=tmp_path, name="local")
    rpc = ",".join(w.endpoint for w in workers)
    remote, err = _ppl("-ctk", ctk, "-ctv", ctv, "--rpc", rpc, "-ngl", "all", tmp=tmp_path, name="rpc")
    assert abs(remote["ppl"] - local["ppl"]) <= 1e-4, (remote["ppl"], local["ppl"])
    # where things live: both workers hold layers and their share of the K and V cache
    lines = [ln for ln in err.splitlines() if ln.startswith("placement: RPC")]
    assert len(lines) == 2, err[-2000:]
    ks = [float(re.search(r"K ([\d.]+) MiB", ln).group(1)) for ln in lines]
    vs = [float(re.search(r"V ([\d.]+) MiB", ln).group(1)) for ln in lines]
    assert all(k > 0 for k in ks) and all(v > 0 for v in vs), lines
    assert abs(sum(ks) - remote["k_mib"]) < 0.02 and abs(sum(vs) - remote["v_mib"]) < 0.02, (lines, remote)
    ranges = [re.search(r"layers (\d+)-(\d+)", ln).groups() for ln in lines]
    assert ranges[0][0] == "0" and int(ranges[1][0]) == int(ranges[0][1]) + 1 and ranges[1][1] == "29", lines


def test_a_worker_killed_mid_ppl_ends_the_run_within_10s_naming_it(require_engine, model_file):
    w = Worker()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "tqgguf", "ppl", MODEL, "-c", "256", "-t", "1",
                                 "--rpc", w.endpoint, "-ngl", "all"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
        first = b""
        while b"[1]" not in first:  # the first chunk came back through the worker: the run is under way
            ch = proc.stdout.read(1)
            assert ch, proc.stderr.read().decode()[-2000:]
            first += ch
        w.kill()
        t0 = time.monotonic()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("ppl did not end within 10 s of its worker's death")
        err = proc.stderr.read().decode()
        assert time.monotonic() - t0 < 10
        assert proc.returncode == 1, (proc.returncode, err[-2000:])
        assert w.endpoint in err and "lost an RPC worker" in err, err[-2000:]
        assert "core dumped" not in err.lower()
    finally:
        w.kill()


class FakeWorker:
    """A listener that speaks the first steps of ggml's RPC protocol as another build would:
    ``mode`` "old" answers HELLO as protocol 3.0.0; "noturbo" is protocol 7.0.0 with one
    device that closes the connection on a turbo type, as a worker built without them does
    (ggml-rpc.cpp deserialize_tensor refuses a type past its GGML_TYPE_COUNT); "silent"
    accepts and never answers."""

    def __init__(self, mode: str):
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _recv(self, c, n):
        buf = b""
        while len(buf) < n:
            part = c.recv(n - len(buf))
            if not part:
                raise ConnectionError
            buf += part
        return buf

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            if self.mode == "silent":
                continue
            try:
                while True:
                    cmd, size = struct.unpack("<BQ", self._recv(c, 9))
                    self._recv(c, size)
                    if cmd == 14:  # HELLO: major, minor, patch, padding, caps
                        ver = (3, 0, 0) if self.mode == "old" else (7, 0, 0)
                        body = bytes(ver) + b"\0" * 25
                    elif cmd == 15:  # DEVICE_COUNT
                        body = struct.pack("<I", 1)
                    elif cmd == 11:  # GET_DEVICE_MEMORY
                        body = struct.pack("<QQ", 1 << 30, 1 << 31)
                    else:  # GET_ALLOC_SIZE of a type this "build" does not know: close
                        break
                    c.sendall(struct.pack("<Q", len(body)) + body)
            except (ConnectionError, OSError):
                pass
            c.close()

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.mark.parametrize("mode,needle", [
    ("old", "speaks RPC protocol v3.0.0"),
    ("noturbo", "does not know the KV cache type turbo4"),
    ("silent", "did not answer within"),
])
def test_an_unusable_worker_is_refused_by_name_before_the_model_loads(require_engine, model_file, mode, needle):
    fake = FakeWorker(mode)
    try:
        t0 = time.monotonic()
        r = _tq("ppl", MODEL, "-c", "128", "--chunks", "1", "--rpc", fake.endpoint, "-ngl", "all", timeout=60)
        assert time.monotonic() - t0 < 30
        assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
        assert fake.endpoint in r.stderr and needle in r.stderr, r.stderr[-2000:]
        assert "model:" not in r.stderr  # refused before the model loaded
    finally:
        fake.close()


def test_an_address_with_no_worker_is_an_error_within_10s(require_engine):
    port = _free_port()
    t0 = time.monotonic()
    r = _tq("ppl", MODEL, "--rpc", f"127.0.0.1:{port}", timeout=60)
    assert time.monotonic() - t0 < 10 + 5  # plus the interpreter's start
    assert r.returncode == 1 and f"no RPC worker at 127.0.0.1:{port}" in r.stderr, r.stderr[-2000:]
    assert "tqgguf rpc-server" in r.stderr


@pytest.mark.parametrize("args,needle", [
    (["--rpc", "localhost"], "a port is required"),
    (["--rpc", "127.0.0.1:70000"], "bad port"),
    (["-sm", "diagonal"], "unknown split mode"),
    (["-ts", "1,x"], "not a list of proportions"),
    (["-ngl", "lots"], "not a layer count"),
])
def test_bad_offload_values_are_usage_errors(args, needle):
    r = _tq("ppl", MODEL, *args, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr[-1500:])
    assert needle in r.stderr, r.stderr[-1500:]


def test_a_split_that_does_not_fit_the_workers_is_a_usage_error(workers):
    w = workers[0].endpoint
    r = _tq("ppl", MODEL, "--rpc", w, "-ts", "3,1", timeout=60)
    assert r.returncode == 2 and "gives 2 proportion(s) for 1 device(s)" in r.stderr, r.stderr[-1500:]
    time.sleep(0.3)
    r = _tq("ppl", MODEL, "--rpc", w, "-sm", "none", "-mg", "2", timeout=60)
    assert r.returncode == 2 and "-mg 2 is past the 1 device(s)" in r.stderr, r.stderr[-1500:]
    time.sleep(0.3)
    r = _tq("ppl", MODEL, "--rpc", w, "-dev", "CUDA7", timeout=60)
    assert r.returncode == 2 and "no offload device 'CUDA7'" in r.stderr and "RPC0" in r.stderr, r.stderr[-1500:]


def test_rpc_server_refuses_an_open_address_without_allow_remote():
    r = _tq("rpc-server", "--host", "0.0.0.0", "-p", str(_free_port()), timeout=60)
    assert r.returncode == 2 and "--allow-remote" in r.stderr and "no authentication" in r.stderr


def test_env_lists_the_offload_variables():
    r = _tq("env", "--json", env=_env(TQGGUF_RPC="10.0.0.2:50052", TQGGUF_SPLIT_MODE="row"), timeout=60)
    st = json.loads(r.stdout)["settings"]
    assert st["rpc"]["value"] == "10.0.0.2:50052" and st["rpc"]["source"]["name"] == "TQGGUF_RPC"
    assert st["split_mode"]["value"] == "row" and st["n_gpu_layers"]["value"] == "auto"


def test_serve_through_a_worker_answers_then_503_while_it_is_gone_then_recovers(require_engine, model_file, tmp_path):
    openai = pytest.importorskip("openai")
    import httpx

    w = Worker()
    port = _free_port()
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "tqgguf", "serve", MODEL, "--port", str(port), "-c", "256",
                             "--ctk", "q8_0", "--ctv", "turbo4", "--rpc", w.endpoint, "-ngl", "all", "-t", "2"],
                            stdout=log, stderr=subprocess.STDOUT, env=_env())
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(0.3)
        text = (tmp_path / "serve.log").read_text()
        assert re.search(rf"placement: RPC0 \({re.escape(w.endpoint)}\): layers 0-29 \+ output", text), text[-3000:]
        oa = openai.OpenAI(base_url=url + "/v1", api_key="unused", timeout=120, max_retries=0)
        msgs = [{"role": "user", "content": "Say hello."}]
        r = oa.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0)
        assert r.choices[0].message.content
        w.kill()
        # the child aborts on the lost worker; until it is back, requests get 503 naming it
        deadline = time.monotonic() + 60
        while True:
            try:
                oa.chat.completions.create(model=MODEL, messages=msgs, max_tokens=4, temperature=0)
            except openai.APIStatusError as e:
                if e.status_code == 503 and w.endpoint in str(e):
                    break
            except openai.APIConnectionError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(0.5)
        w = Worker(port=w.port)  # the worker is back on its address
        r = oa.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0)
        assert r.choices[0].message.content
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        w.kill()


def test_the_wire_facts_match_the_pinned_ggml_rpc_source(require_engine):
    """tqgguf.devices speaks ggml's RPC protocol itself to check workers: its command numbers,
    version and sizes must be those of the pinned tree's ggml-rpc (a newer pin that changes
    them fails here, not on a user's worker)."""
    from tqgguf.builder.source import source_tree
    from tqgguf import devices

    root = source_tree() / "vendor" / "llama.cpp" / "ggml"
    header = (root / "include" / "ggml-rpc.h").read_text()
    src = (root / "src" / "ggml-rpc" / "ggml-rpc.cpp").read_text()
    transport = (root / "src" / "ggml-rpc" / "transport.h").read_text()
    assert int(re.search(r"RPC_PROTO_MAJOR_VERSION\s+(\d+)", header).group(1)) == devices.RPC_PROTO_MAJOR
    assert int(re.search(r"RPC_PROTO_MINOR_VERSION\s+(\d+)", header).group(1)) == devices.RPC_PROTO_MINOR
    assert int(re.search(r"RPC_CONN_CAPS_SIZE = (\d+)", transport).group(1)) == devices.RPC_CONN_CAPS_SIZE
    enum = re.search(r"enum rpc_cmd \{(.*?)\};", src, re.S).group(1)
    names = [re.match(r"\s*(RPC_CMD_\w+)", ln).group(1) for ln in enum.splitlines() if re.match(r"\s*RPC_CMD_\w+", ln)]
    for name in ("RPC_CMD_GET_DEVICE_MEMORY", "RPC_CMD_GET_ALLOC_SIZE", "RPC_CMD_HELLO", "RPC_CMD_DEVICE_COUNT"):
        assert names.index(name) == getattr(devices, name), name
    struct_body = re.search(r"struct rpc_tensor \{(.*?)\};", src, re.S).group(1)
    sizes = {"uint64_t": 8, "uint32_t": 4, "int32_t": 4, "char": 1}
    consts = {"GGML_MAX_DIMS": 4, "GGML_MAX_SRC": devices.GGML_MAX_SRC, "GGML_MAX_OP_PARAMS / sizeof(int32_t)": 16,
              "GGML_MAX_NAME": 64}
    total = 0
    for m in re.finditer(r"(\w+)\s+\w+(?:\[([^\]]+)\])?;", struct_body):
        total += sizes[m.group(1)] * (consts[m.group(2).strip()] if m.group(2) else 1)
    assert total == devices.RPC_TENSOR_SIZE
