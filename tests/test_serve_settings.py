"""``tqgguf serve`` read as Ollama reads its settings: ``OLLAMA_NUM_PARALLEL=0`` and
``OLLAMA_MAX_LOADED_MODELS=0`` mean auto, every bad value is an error that names the flag or
variable it came from (the same message from ``tqgguf env``), a body that stops arriving gets
a 408 within TQGGUF_BODY_TIMEOUT, and the startup lines say what flash attention became and
where threads and -ngl came from.

One real server (SmolLM2-135M, ``-v`` so llama-server's own lines are in the log to compare
with); the refusals run the real ``tqgguf env`` / ``tqgguf serve`` commands, which stop before
anything is loaded.
"""
from __future__ import annotations

import json
import re
import socket
import subprocess
import time

import httpx
import pytest
from click.testing import CliRunner

from tqgguf.builder.driver import llama_server_path
from tqgguf.cli import main as cli
from tqgguf.config import Settings, SettingsError, _var, check_listen_address, resolve_settings
from tqgguf.server.child import gpu_devices
from tqgguf.server.run import flash_attention_applied
from tqgguf.variables import VARIABLES

from .test_server import ALIAS, QWEN, Server, _clean_env, _free_port, _serve_cmd

BODY_TIMEOUT_S = 2.0

# one bad value per setting that has an OLLAMA_ variable; the test below demands an entry for each
BAD = {
    "cache_type_k": "q9_9", "cache_type_v": "q9_9", "flash_attention": "maybe", "host": "garbage",
    "port": ":99999", "context_length": "8", "num_parallel": "-1", "keep_alive": "5 minutes",
    "ollama_models": "{file}", "max_loaded_models": "many", "origins": "a**b",
    "max_queue": "-1",
}
OLLAMA_ALIASED = [n for n in Settings.model_fields if any(e.startswith("OLLAMA_") for e in _var(n).env)]


def _no_settings_env() -> dict[str, str | None]:
    """CliRunner env: every settings variable unset but the cache and model directories."""
    return {k: None for k in VARIABLES if k not in ("TQGGUF_CACHE", "TQGGUF_MODELS")}


def _expected_error(env: dict[str, str]) -> str:
    with pytest.raises(SettingsError) as e:
        check_listen_address(resolve_settings({}, env))
    assert len(e.value.errors) == 1, e.value.errors
    return e.value.errors[0]


def test_every_ollama_aliased_setting_has_a_bad_value_here():
    assert sorted(BAD) == sorted(OLLAMA_ALIASED)


# every variable of those settings: OLLAMA_* and, where there is one, its TQGGUF_* twin
# (OLLAMA_MODELS, Ollama's own store, has none)
_ALIASED_VARS = [(n, e) for n in OLLAMA_ALIASED for e in _var(n).env]


@pytest.mark.parametrize("name, var", _ALIASED_VARS)
def test_a_bad_value_is_an_error_naming_its_variable_in_env_and_serve(name, var, tmp_path):
    bad = BAD[name].format(file=tmp_path / "a-file")
    (tmp_path / "a-file").write_text("not a directory")
    msg = _expected_error({var: bad})
    assert msg.startswith(f"{var}={bad!r}: ")
    others = [e for e in _var(name).env if e != var] + [f for _, f in _var(name).flags]
    assert not any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", msg) for o in others), msg
    runner = CliRunner()
    env = {**_no_settings_env(), var: bad}
    r = runner.invoke(cli, ["env"], env=env)
    assert r.exit_code == 2 and f"error: {msg}" in r.stderr.splitlines(), r.output
    r = runner.invoke(cli, ["env", "--json"], env=env)
    assert r.exit_code == 2 and json.loads(r.stdout) == {"errors": [msg]}
    r = runner.invoke(cli, ["serve", ALIAS], env=env)
    assert r.exit_code == 2 and f"error: {msg}" in r.stderr.splitlines(), r.output


@pytest.mark.parametrize("flag, key, bad", [("--host", "host", "garbage"), ("-np", "num_parallel", "0"),
                                            ("-c", "context_length", "8"), ("-fa", "flash_attention", "maybe")])
def test_a_bad_flag_is_named_as_the_flag_with_variables_set_beside_it(flag, key, bad):
    msg = _expected_error_flag(key, bad)
    assert msg.startswith(f"{flag} {bad!r}: ") and "OLLAMA_" not in msg.split(":")[0]
    env = {**_no_settings_env(), "OLLAMA_HOST": "127.0.0.1:11434", "OLLAMA_NUM_PARALLEL": "2"}
    r = CliRunner().invoke(cli, ["serve", ALIAS, flag, bad], env=env)
    assert r.exit_code == 2 and f"error: {msg}" in r.stderr.splitlines(), r.output


def _expected_error_flag(key: str, bad: str) -> str:
    with pytest.raises(SettingsError) as e:
        check_listen_address(resolve_settings({key: bad}, {}))
    return e.value.errors[0]


def test_flash_attention_applied_reads_llama_cpps_own_lines():
    # the lines llama.cpp (pinned tree, src/llama-context.cpp) prints for each case
    assert flash_attention_applied(["llama_context: flash_attn    = auto",
                                    "resolve_fused_ops: Flash Attention enabled"]) == "on"
    assert flash_attention_applied(["llama_context: flash_attn    = auto",
                                    "resolve_fused_ops: layer 3 is assigned to device CUDA0 but Flash Attention is "
                                    "assigned to device CPU (usually due to missing support)",
                                    "resolve_fused_ops: Flash Attention not supported, set to disabled"]) == "off"
    assert flash_attention_applied(["llama_init_from_model: enabling flash_attn since it is required for quantized "
                                    "V cache", "llama_context: flash_attn    = enabled"]) == "on"
    assert flash_attention_applied(["llama_context: flash_attn    = disabled"]) == "off"
    assert flash_attention_applied(["llama_context: n_ctx = 512"]) is None


@pytest.fixture(scope="module")
def auto_srv(require_engine, model_file, tmp_path_factory):
    model_file(ALIAS)
    env = _clean_env(OLLAMA_NUM_PARALLEL="0", OLLAMA_MAX_LOADED_MODELS="0", TQGGUF_N_GPU_LAYERS="0",
                     TQGGUF_BODY_TIMEOUT=f"{BODY_TIMEOUT_S:g}s")
    s = Server(ALIAS, tmp_path_factory.mktemp("serve"), "-c", "256", "-v", env=env)
    yield s
    s.stop()


def test_auto_parallel_and_max_loaded_models_resolve_as_ollama_and_say_so(auto_srv):
    log = auto_srv.log()
    assert "slots: 1 (auto: OLLAMA_NUM_PARALLEL=0), continuous batching, 256 tokens each" in log
    # this CPU build lists no GPU: Ollama's 3 x max(GPUs, 1)
    assert "max loaded models: 3 (auto: OLLAMA_MAX_LOADED_MODELS=0: 3 per GPU llama-server lists, 3 on the CPU)" in log
    assert auto_srv.http.get("/health").json()["runners"][0]["n_ctx"] == 256
    assert "load_model: initializing, n_slots = 1, n_ctx_slot = 256" in log  # llama-server's own count


def test_startup_names_flash_attentions_outcome_and_where_threads_and_ngl_came_from(auto_srv):
    log = auto_srv.log()
    m = re.search(r"flash attention: auto \(from default\) -> (on|off) \(llama-server's log\)", log)
    assert m, log[-3000:]
    # the child's own line (shown with -v) agrees with what serve reports
    own = "enabled" if m.group(1) == "on" else "not supported, set to disabled"
    assert f"Flash Attention {own}" in log
    assert "threads: 2 (from flag -t); -ngl 0 (from env TQGGUF_N_GPU_LAYERS), every layer on the CPU" in log
    assert "at most 2s between its parts (from env TQGGUF_BODY_TIMEOUT), else 408" in log


def _stalled_post(port: int, path: str, timeout: float = 30.0) -> tuple[float, bytes, bytes]:
    """POST declaring Content-Length 100 and sending 1 byte; (seconds to the answer, the
    answer, what came after it: b"" once the server closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        t0 = time.monotonic()
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  "Content-Length: 100\r\n\r\n{".encode())
        data = b""
        while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < int(
                re.search(rb"content-length: (\d+)", data, re.I).group(1)):
            got = s.recv(65536)
            assert got, data
            data += got
        elapsed = time.monotonic() - t0
        after = s.recv(65536)  # the server closes: b"" (a held connection would raise socket.timeout)
    return elapsed, data, after


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat"])
def test_a_body_that_stops_arriving_gets_408_and_the_connection_closes(auto_srv, path):
    elapsed, data, after = _stalled_post(auto_srv.port, path)
    head, _, payload = data.partition(b"\r\n\r\n")
    assert head.split()[1] == b"408" and re.search(rb"connection: close", head, re.I), head
    assert BODY_TIMEOUT_S - 0.1 <= elapsed < BODY_TIMEOUT_S + 3, elapsed
    msg = "the request body stopped arriving: no data for 2s after 1 bytes of the 100 declared (TQGGUF_BODY_TIMEOUT)"
    body = json.loads(payload)
    if path.startswith("/api/"):
        assert body == {"error": msg}
    else:
        assert body["error"]["message"] == msg and body["error"]["type"] == "invalid_request_error"
    assert after == b""
    assert auto_srv.health()[0] == 200


def test_a_slow_body_that_keeps_coming_is_not_cut_off(auto_srv):
    # three parts, each 1.2 s after the last (3.6 s in all, more than the 2 s limit): the limit is
    # for the wait between parts, as nginx's client_body_timeout
    body = json.dumps({"model": ALIAS}).encode()
    parts = [body[:5], body[5:10], body[10:]]

    def slow():
        for i, p in enumerate(parts):
            if i:
                time.sleep(1.2)
            yield p

    r = httpx.post(auto_srv.url + "/api/show", content=slow(), headers={"Content-Length": str(len(body))},
                   timeout=30)
    assert r.status_code == 200 and "modelfile" in r.json()


@pytest.mark.engine
def test_later_refusals_name_the_variable_a_value_came_from(model_file):
    model_file(QWEN)
    # K centering full needs one slot: the slots came from OLLAMA_NUM_PARALLEL, and the message says so
    p = subprocess.run(_serve_cmd(QWEN, "--port", str(_free_port()), "--ctk", "turbo4", "--k-center", "full"),
                       capture_output=True, text=True, env=_clean_env(OLLAMA_NUM_PARALLEL="3"), timeout=120)
    assert p.returncode == 2 and "with -np 3" in p.stderr, p.stderr
    assert "(-np 3 from env OLLAMA_NUM_PARALLEL='3', --k-center from flag --k-center='full')" in p.stderr, p.stderr
    # GPU layers asked for by a variable on a CPU-only llama-server
    if gpu_devices(llama_server_path(None)):
        return  # a GPU build: nothing to refuse
    p = subprocess.run(_serve_cmd(ALIAS, "--port", str(_free_port())), capture_output=True, text=True,
                       env=_clean_env(TQGGUF_N_GPU_LAYERS="5"), timeout=120)
    assert p.returncode == 2 and "-ngl 5 (env TQGGUF_N_GPU_LAYERS='5') asks for GPU layers" in p.stderr, p.stderr
