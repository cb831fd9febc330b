"""``tqgguf serve`` as a user runs it: a real ``tqgguf serve`` process fronting a real
llama-server child, driven by the real ``openai`` and ``ollama`` client packages (and
httpx where a raw HTTP detail is the point), with SmolLM2-135M and turbo KV caches.

One server per module (``srv``: ``--ctk q8_0 --ctv turbo4 -c 512 -np 4``); Qwen2.5-Coder
is loaded into it on demand by name for the tool-call round trip. The test that kills
the child runs last. CLI refusals run their own short-lived processes.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import jsonschema
import pytest

from tqgguf.variables import VARIABLES

ollama = pytest.importorskip("ollama")
openai = pytest.importorskip("openai")

ALIAS = "smollm2-135m"
QWEN = "qwen2.5-coder-0.5b"
CTX = 512
GREEDY = {"temperature": 0, "repeat_penalty": 1.0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES or k in ("TQGGUF_CACHE", "TQGGUF_MODELS")}
    env.update(extra)
    return env


def _serve_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "tqgguf", "serve", *args]


class Server:
    """A ``tqgguf serve`` subprocess; ``log()`` is its output so far."""

    def __init__(self, model: str, tmp: Path, *args: str, env: dict[str, str] | None = None,
                 cwd: Path | None = None):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"serve-{self.port}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(_serve_cmd(model, "--port", str(self.port), "-t", "2", *args),
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env or _clean_env(), cwd=cwd)
        self.http = httpx.Client(base_url=self.url, timeout=180)
        self.oa = openai.OpenAI(base_url=self.url + "/v1", api_key="unused", timeout=180, max_retries=0)
        self.ol = ollama.Client(host=self.url, timeout=180)
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if self.http.get("/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server did not come up:\n{self.log()}")
            time.sleep(0.2)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self) -> tuple[int, dict]:
        r = self.http.get("/health")
        return r.status_code, r.json()

    def metric(self, name: str) -> float:
        """One of llama-server's ``llamacpp:`` metrics, through our /metrics."""
        text = self.http.get("/metrics").text
        m = re.search(rf"^llamacpp:{name}\s+([0-9.]+)", text, re.M)
        assert m, text[:500]
        return float(m.group(1))

    def processing(self) -> float:
        """llama-server's requests_processing gauge."""
        return self.metric("requests_processing")

    def sigterm(self, threads=()) -> tuple[float, str]:
        """Send SIGTERM, wait for the process and for ``threads`` (its clients); returns the seconds
        from the signal to the exit, and the log. Asserts that the process ended by the signal
        within the shutdown's grace period + 1.5 s."""
        from tqgguf.server.run import SHUTDOWN_GRACE_S

        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=60)
        took = time.monotonic() - t0
        for t in threads:
            t.join(30)
        log = self.log()
        assert rc == -signal.SIGTERM, log[-3000:]
        assert took < SHUTDOWN_GRACE_S + 1.5, f"exited {took:.2f} s after SIGTERM\n{log[-3000:]}"
        return took, log

    def stop(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def _children(pid: int) -> list[int]:
    """Live llama-server processes whose parent is ``pid``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and cmd.endswith("llama-server"):
            out.append(int(d.name))
    return out


@pytest.fixture(scope="module")
def model_path(require_engine, model_file) -> Path:
    return model_file(ALIAS)


@pytest.fixture(scope="module")
def srv(model_path, tmp_path_factory):
    s = Server(ALIAS, tmp_path_factory.mktemp("serve"), "--ctk", "q8_0", "--ctv", "turbo4", "-c", str(CTX),
               "-np", "4", "--keep-alive", "-1")
    yield s
    s.stop()


# -- startup and supervision ----------------------------------------------------------------


def test_startup_log_states_the_child_and_the_effective_settings(srv):
    log = srv.log()
    assert "KV cache: K q8_0 (from flag --ctk), V turbo4 (from flag --ctv)" in log
    assert "rotation: on (from default): LLAMA_ATTN_ROT_DISABLE=0" in log
    assert f"slots: 4 (from flag -np), continuous batching, {CTX} tokens each (from flag -c; llama-server -c {4 * CTX})" in log
    assert re.search(r"llama-server: \S+llama-server \(pid \d+, loopback port \d+\) ready in", log)
    code, h = srv.health()
    assert code == 200 and h["status"] == "ok" and h["runners"][0]["n_ctx"] == CTX
    assert _children(srv.proc.pid) == [h["runners"][0]["pid"]]


# -- OpenAI passthrough -----------------------------------------------------------------------


def test_openai_response_format_json_schema_validates_and_parse_works(srv):
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        population: int

    r = srv.oa.chat.completions.parse(model=ALIAS, messages=[{"role": "user", "content": "Describe Paris as JSON."}],
                                      response_format=City, temperature=0, max_tokens=100)
    city = r.choices[0].message.parsed
    assert isinstance(city, City) and isinstance(city.population, int)
    jsonschema.validate(json.loads(r.choices[0].message.content), City.model_json_schema())


def test_openai_streaming_logprobs_and_n(srv):
    chunks = list(srv.oa.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "Say hi"}],
                                                 max_tokens=8, temperature=0, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    plain = srv.oa.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "Say hi"}],
                                           max_tokens=8, temperature=0, logprobs=True, top_logprobs=3, n=2)
    assert text and plain.choices[0].message.content == text
    lp = plain.choices[0].logprobs.content
    assert len(lp) == plain.usage.completion_tokens and len(lp[0].top_logprobs) == 3
    assert lp[0].logprob <= 0 and lp[0].token == lp[0].top_logprobs[0].token
    assert len(plain.choices) == 2


def test_legacy_completions_logprobs_have_openais_shape_streamed_or_not(srv):
    """/v1/completions with logprobs: tokens, token_logprobs, top_logprobs, text_offset (OpenAI's
    legacy shape; llama-server answers in the chat shape), the offsets counted from the prompt's end."""
    prompt = "The capital of France is"
    kw = dict(model=ALIAS, prompt=prompt, max_tokens=6, logprobs=2, temperature=0, extra_body={"ignore_eos": True})
    r = srv.oa.completions.create(**kw)
    lp, text = r.choices[0].logprobs, r.choices[0].text
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    assert "".join(lp.tokens) == text
    assert lp.text_offset == [len(prompt) + len("".join(lp.tokens[:i])) for i in range(6)]
    for tok, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert 1 <= len(top) <= 2 and logprob <= 0
        assert top[tok] == pytest.approx(logprob) and logprob == pytest.approx(max(top.values()))  # greedy
    chunks = [c.choices[0].logprobs for c in srv.oa.completions.create(**kw, stream=True)
              if c.choices and c.choices[0].logprobs is not None]
    assert sum((c.tokens for c in chunks), []) == lp.tokens
    assert sum((c.text_offset for c in chunks), []) == lp.text_offset
    assert sum((c.token_logprobs for c in chunks), []) == pytest.approx(lp.token_logprobs, abs=1e-3)


def test_legacy_logprob_offsets_count_characters_across_a_split_utf8_character():
    from tqgguf.server.routes_openai import LegacyLogprobs

    # "é" (C3 A9) split over two byte tokens, then " x": llama-server's token strings for the
    # halves are not text; offsets count characters of prompt + completion
    content = [{"token": "\ufffd", "bytes": [0xC3], "logprob": -1.0, "top_logprobs": []},
               {"token": "\ufffd", "bytes": [0xA9], "logprob": -0.5, "top_logprobs": []},
               {"token": " x", "bytes": [32, 120], "logprob": -0.25, "top_logprobs": [{"token": " x", "logprob": -0.25}]}]
    conv = LegacyLogprobs("café ")
    first, second = {"index": 0, "logprobs": {"content": content[:1]}}, {"index": 0, "logprobs": {"content": content[1:]}}
    conv.convert(first)
    conv.convert(second)  # a later stream chunk: the offsets go on
    assert first["logprobs"]["text_offset"] + second["logprobs"]["text_offset"] == [5, 5, 6]
    assert second["logprobs"]["top_logprobs"] == [{}, {" x": -0.25}]


def test_openai_embeddings_models_and_unknown_model_404(srv):
    e = srv.oa.embeddings.create(model=ALIAS, input=["the cat sat", "quantum chromodynamics"])
    v0, v1 = (d.embedding for d in e.data)
    assert len(v0) == 576 and abs(sum(x * x for x in v0) - 1) < 1e-3  # SmolLM2-135M: n_embd 576, L2-normalised
    assert v0 != v1
    assert srv.oa.models.retrieve(ALIAS).id == ALIAS
    assert ALIAS in [m.id for m in srv.oa.models.list().data]
    with pytest.raises(openai.NotFoundError) as ei:
        srv.oa.models.retrieve("no-such-model")
    assert "model 'no-such-model' not found" in str(ei.value)
    with pytest.raises(openai.NotFoundError):
        srv.oa.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    m = srv.http.get("/metrics")
    assert m.status_code == 200 and "llamacpp:prompt_tokens_total" in m.text


def test_tool_call_round_trip_with_qwen_loaded_on_demand(srv):
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    opts = {"temperature": 0, "num_predict": 60}
    r = srv.ol.chat(model=QWEN, messages=msgs, tools=tools, options=opts)  # loads Qwen next to SmolLM2
    call = r.message.tool_calls[0]
    assert call.function.name == "get_weather" and call.function.arguments["city"].lower() == "paris"
    assert r.message.content == ""
    result = {"role": "tool", "tool_name": "get_weather", "content": "The weather in Paris is 18 degrees C and sunny."}
    # a 0.5B model answers from the result when asked again (offered the tools, it calls them again)
    ask = {"role": "user", "content": "So, what is the weather?"}
    msgs += [r.message.model_dump(exclude_none=True), result]
    final = srv.ol.chat(model=QWEN, messages=msgs + [ask], options=opts)
    assert "18" in final.message.content and not final.message.tool_calls
    streamed = list(srv.ol.chat(model=QWEN, messages=msgs[:1], tools=tools, options=opts, stream=True))
    assert [c.function.name for p in streamed for c in (p.message.tool_calls or [])] == ["get_weather"]
    # OpenAI route, passed through: llama-server renders the call and the result with Qwen's template
    oa_msgs = [msgs[0], {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
               {"role": "tool", "tool_call_id": "c1", "content": result["content"]}, ask]
    o = srv.oa.chat.completions.create(model=QWEN, messages=oa_msgs, temperature=0, max_tokens=40)
    assert "18" in o.choices[0].message.content
    assert {m.model for m in srv.ol.ps().models} >= {f"{QWEN}:latest", f"{ALIAS}:latest"}


# -- Ollama routes ------------------------------------------------------------------------------


SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


def test_ollama_format_schema_and_json_validate(srv):
    r = srv.ol.chat(model=ALIAS, messages=[{"role": "user", "content": "Invent a person; give name and age."}],
                    format=SCHEMA, options={**GREEDY, "num_predict": 60})
    jsonschema.validate(json.loads(r.message.content), SCHEMA)
    assert r.done and r.done_reason == "stop" and r.eval_count > 0 and r.prompt_eval_duration > 0
    g = srv.ol.generate(model=ALIAS, prompt='Return a JSON object with one key "colour" whose value is "blue".',
                        format="json", options={**GREEDY, "num_predict": 40})
    assert g.done_reason == "stop" and isinstance(json.loads(g.response), dict)


def test_ollama_generate_context_follow_up_answers(srv):
    first = srv.ol.generate(model=ALIAS, prompt="My name is Ada.", options={**GREEDY, "num_predict": 12})
    assert first.context and first.eval_count > 0
    follow = srv.ol.generate(model=ALIAS, prompt="What is my name?", context=first.context,
                             options={**GREEDY, "num_predict": 12})
    assert follow.eval_count > 0 and follow.response.strip()
    assert follow.context[:len(first.context)] == first.context
    raw = srv.ol.generate(model=ALIAS, prompt="1, 2, 3, 4,", raw=True, options={**GREEDY, "num_predict": 6})
    assert raw.response.strip().startswith("5")


def test_ollama_streaming_chat_ends_with_done_and_timings(srv):
    parts = list(srv.ol.chat(model=ALIAS, messages=[{"role": "user", "content": "Say hi"}], stream=True,
                             options={**GREEDY, "num_predict": 10}))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    assert parts[-1].done_reason == "length" and parts[-1].eval_count == 10
    assert "".join(p.message.content for p in parts).strip()


def test_ollama_think_and_logprobs_are_honoured_or_refused(srv):
    with pytest.raises(ollama.ResponseError) as ei:
        srv.ol.chat(model=ALIAS, messages=[{"role": "user", "content": "hi"}], think=True)
    assert ei.value.status_code == 400 and "does not support thinking" in ei.value.error
    r = srv.http.post("/api/chat", json={"model": ALIAS, "messages": [{"role": "user", "content": "hi"}],
                                         "stream": False, "logprobs": True, "top_logprobs": 2,
                                         "options": {**GREEDY, "num_predict": 4}})
    lp = r.json()["logprobs"]
    assert len(lp) == 4 and len(lp[0]["top_logprobs"]) == 2 and lp[0]["logprob"] <= 0


def test_ollama_embed_embeddings_show_tags_version_and_head(srv):
    e = srv.ol.embed(model=ALIAS, input=["hello world", "goodbye"], dimensions=64)
    assert len(e.embeddings) == 2 and len(e.embeddings[0]) == 64 and e.prompt_eval_count > 2
    assert abs(sum(x * x for x in e.embeddings[0]) - 1) < 1e-3
    legacy = srv.ol.embeddings(model=ALIAS, prompt="hello world")
    assert len(legacy.embedding) == 576
    show = srv.ol.show(ALIAS)
    assert show.details.family == "llama" and show.modelinfo["llama.context_length"] == 8192
    assert "<|im_start|>" in show.template
    names = [m.model for m in srv.ol.list().models]
    assert f"{ALIAS}:latest" in names
    assert srv.http.get("/api/version").json()["version"] >= "0.12"
    for path in ("/", "/api/version", "/api/tags"):
        assert srv.http.head(path).status_code == 200


def test_num_ctx_reloads_with_the_larger_context_and_says_so(srv):
    words = " ".join(["alpha beta gamma delta"] * 200)  # ~800+ tokens: more than the 512 loaded
    r = srv.http.post("/api/generate", json={"model": ALIAS, "prompt": words + "\nSummarise.", "stream": False,
                                             "options": {**GREEDY, "num_predict": 2, "num_ctx": 2048}})
    assert r.status_code == 200, r.text
    assert r.headers["x-tqgguf-reloaded"] == "num_ctx 2048"
    assert r.json()["prompt_eval_count"] > CTX and r.json()["load_duration"] > 0
    ps = {m.model: m for m in srv.ol.ps().models}
    assert ps[f"{ALIAS}:latest"].context_length == 2048
    assert "reloading smollm2-135m with num_ctx 2048" in srv.log()
    with pytest.raises(ollama.ResponseError) as ei:
        srv.ol.generate(model=ALIAS, prompt="x", options={"num_ctx": 100000})
    assert ei.value.status_code == 400 and "above the maximum context 8192" in ei.value.error


def test_num_ctx_smaller_than_the_loaded_context_reloads_with_it_as_ollama_does(srv):
    """Ollama's scheduler reloads when a request's num_ctx differs from the loaded runner's,
    smaller included (needsReload compares the options); said as the larger-context reload is."""
    ps = {m.model: m for m in srv.ol.ps().models}
    assert ps[f"{ALIAS}:latest"].context_length == 2048  # left by the test above
    r = srv.http.post("/api/generate", json={"model": ALIAS, "prompt": "Hi", "stream": False,
                                             "options": {**GREEDY, "num_predict": 2, "num_ctx": 1024}})
    assert r.status_code == 200, r.text
    assert r.headers["x-tqgguf-reloaded"] == "num_ctx 1024" and r.json()["load_duration"] > 0
    assert {m.model: m for m in srv.ol.ps().models}[f"{ALIAS}:latest"].context_length == 1024
    assert "reloading smollm2-135m with num_ctx 1024 (was num_ctx 2048)" in srv.log()
    # it really runs with 1024: a ~1100-token prompt no longer fits (truncate: false; by default it is
    # truncated as Ollama does, tests/test_serve_ollama.py)
    words = " ".join(["alpha beta gamma delta"] * 270)
    r = srv.http.post("/api/generate", json={"model": ALIAS, "prompt": words, "stream": False, "truncate": False,
                                             "options": {**GREEDY, "num_predict": 2, "num_ctx": 1024}})
    assert r.status_code == 400 and "available context size (1024 tokens)" in r.json()["error"], r.text
    r = srv.http.post("/api/chat", json={"model": ALIAS, "messages": [{"role": "user", "content": "Hi"}],
                                         "stream": False, "options": {**GREEDY, "num_predict": 2, "num_ctx": CTX}})
    assert r.status_code == 200 and r.headers["x-tqgguf-reloaded"] == f"num_ctx {CTX}"  # back to the module's
    with pytest.raises(ollama.ResponseError) as ei:
        srv.ol.generate(model=ALIAS, prompt="x", options={"num_ctx": 32})
    assert ei.value.status_code == 400 and "options.num_ctx 32 must be an integer of at least 64" in ei.value.error


def _child_argv(srv) -> list[str]:
    pid = next(r["pid"] for r in srv.health()[1]["runners"] if r["kind"] == "chat" and r["name"] == ALIAS)
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def test_ollama_load_options_equal_to_the_running_ones_are_accepted_others_reload_or_are_refused(srv):
    # what the server runs with: -t 2, no GPU layers, mmap, llama-server's -b 2048 (the context is >= 2048),
    # SmolLM2-135M's 9 query heads over 3 KV heads, K q8_0 / V turbo4
    same = {"num_thread": 2, "num_gpu": 0, "use_mmap": True, "main_gpu": 0, "num_batch": 2048, "low_vram": False,
            "f16_kv": False, "use_mlock": False, "num_gqa": 3}
    reloads_before = srv.log().count("reloading ")
    r = srv.http.post("/api/generate", json={"model": ALIAS, "prompt": "hi", "stream": False,
                                             "options": {**same, "num_predict": 2}})
    assert r.status_code == 200, r.text
    assert "x-tqgguf-reloaded" not in r.headers and r.json()["load_duration"] == 0
    srv.ol.chat(model=ALIAS, messages=[{"role": "user", "content": "hi"}],
                options={"num_gpu": -1, "num_thread": 0, "num_predict": 2})  # Ollama's "server's choice"
    assert srv.log().count("reloading ") == reloads_before

    refused = [({"num_gpu": 99}, ["options.num_gpu 99", "num_gpu 0", "lists no GPU device"]),
               ({"main_gpu": 1}, ["options.main_gpu 1", "main_gpu 0", "CUDA_VISIBLE_DEVICES"]),
               ({"f16_kv": True}, ["options.f16_kv true", "f16_kv false", "K q8_0 and V turbo4"]),
               ({"num_gqa": 8}, ["options.num_gqa 8", "num_gqa 3"]),
               ({"low_vram": True}, ["options.low_vram true", "low_vram false"]),
               ({"num_thread": "2"}, ["options.num_thread \"2\" must be an integer"])]
    for opts, needles in refused:
        with pytest.raises(ollama.ResponseError) as ei:
            srv.ol.generate(model=ALIAS, prompt="hi", options={**opts, "num_predict": 2})
        assert ei.value.status_code == 400 and all(n in ei.value.error for n in needles), (opts, ei.value.error)

    # a different num_batch reloads the model with it (-b), once; requests that send it again keep it
    r = srv.http.post("/api/chat", json={"model": ALIAS, "messages": [{"role": "user", "content": "hi"}],
                                         "stream": False, "options": {"num_batch": 1024, "num_predict": 2}})
    assert r.status_code == 200, r.text
    assert r.headers["x-tqgguf-reloaded"] == "num_batch 1024" and r.json()["load_duration"] > 0
    argv = _child_argv(srv)
    assert argv[argv.index("-b") + 1] == "1024"
    assert "reloading smollm2-135m with num_batch 1024 (was num_batch 2048)" in srv.log()
    r = srv.http.post("/api/generate", json={"model": ALIAS, "prompt": "hi", "stream": False,
                                             "options": {"num_batch": 1024, "num_predict": 2}})
    assert r.status_code == 200 and "x-tqgguf-reloaded" not in r.headers
    # a request that leaves num_batch out gets serve's setting back, as Ollama fills in its defaults
    r = srv.http.post("/api/generate", json={"model": ALIAS, "prompt": "hi", "stream": False,
                                             "options": {"num_predict": 2}})
    assert r.status_code == 200 and r.headers["x-tqgguf-reloaded"] == "num_batch 2048"
    assert "-b" not in _child_argv(srv)
    assert ("reloading smollm2-135m with num_batch 2048 (was num_batch 1024); serve's settings for num_batch, "
            "which the request does not set") in srv.log()
    assert srv.log().count("reloading ") == reloads_before + 2


def test_keep_alive_zero_unloads_once_and_the_default_returns(srv):
    srv.ol.generate(model=ALIAS, prompt="hi", keep_alive=0, options={"num_predict": 2})
    assert ALIAS + ":latest" not in [m.model for m in srv.ol.ps().models]
    again = srv.ol.generate(model=ALIAS, prompt="hi", options={"num_predict": 2})
    assert again.load_duration > 0  # loaded on demand for this request: Ollama reports the load
    assert srv.ol.generate(model=ALIAS, prompt="hi", options={"num_predict": 2}).load_duration == 0
    time.sleep(1.0)
    ps = {m.model: m for m in srv.ol.ps().models}
    assert ALIAS + ":latest" in ps  # loaded again and kept: the server default (-1) applies again
    assert ps[ALIAS + ":latest"].expires_at.year > 2100


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("route,body,status,needle", [
    ("/api/chat", {"model": "no-such", "messages": [{"role": "user", "content": "x"}]}, 404, "model 'no-such' not found"),
    ("/api/chat", {"model": ALIAS, "messages": [{"role": "user", "content": "x"}], "options": {"bogus": 1}}, 400,
     "unknown option 'bogus'"),
    ("/api/generate", {"model": ALIAS, "prompt": "x", "format": {"type": "object", "properties": {
        "a": {"$ref": "#/definitions/missing"}}}}, 400, "definitions"),
    ("/api/chat", {"model": ALIAS, "messages": "hello"}, 400, "messages must be a list"),
    ("/api/generate", {"model": ALIAS, "prompt": "x", "context": ["a"]}, 400, "context must be"),
    ("/api/show", {"model": "../../etc/passwd"}, 404, "not found"),
])
def test_bad_ollama_requests_get_the_error_shape(srv, route, body, status, needle):
    r = srv.http.post(route, json=body)
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error"} and needle in r.json()["error"]


def _raw_post(srv, path: str, headers: dict[str, str], body: bytes = b"", chunks: list[bytes] = ()) -> tuple[int, dict]:
    """POST over a bare socket (a declared length need not be sent; chunked bodies by hand);
    (status, JSON body). Times out (socket.timeout) if the server waits for a body that never comes."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        s.sendall((head + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode() + body)
        for c in chunks:
            s.sendall(f"{len(c):x}\r\n".encode() + c + b"\r\n")
        if chunks:
            s.sendall(b"0\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < int(
                re.search(rb"content-length: (\d+)", data, re.I).group(1)):
            got = s.recv(65536)
            assert got, data
            data += got
    head, _, payload = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload)


def test_a_body_over_the_limit_is_refused_with_413_in_the_api_shape_without_reading_it(srv):
    # declared 64 MiB, sent 14 bytes: the answer comes at once (waiting for the body would time out)
    status, body = _raw_post(srv, "/v1/chat/completions", {"Content-Length": str(64 << 20)}, b'{"messages": [')
    assert status == 413 and body["error"]["code"] == 413 and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"] == ("the request body is 67108864 bytes, more than the limit of 32 MiB "
                                        "(TQGGUF_MAX_REQUEST_BODY)")
    status, body = _raw_post(srv, "/api/chat", {"Content-Length": str(64 << 20)}, b'{"messages": [')
    assert status == 413 and set(body) == {"error"} and "67108864 bytes, more than the limit of 32 MiB" in body["error"]
    # chunked, no length: refused once the bytes read pass the limit
    status, body = _raw_post(srv, "/api/generate", {"Transfer-Encoding": "chunked"},
                             chunks=[b'{"model": "smollm2-135m", "prompt": "'] + [b"x" * (1 << 20)] * 33)
    assert status == 413 and body == {"error": "the request body is more than the limit of 32 MiB "
                                               "(TQGGUF_MAX_REQUEST_BODY)"}
    assert srv.health()[0] == 200


def test_deeply_nested_json_and_unknown_routes_are_clean_4xx(srv):
    deep = "[" * 100000 + "]" * 100000
    r = srv.http.post("/api/chat", content=deep, headers={"content-type": "application/json"})
    assert r.status_code == 400 and "nested too deeply" in r.json()["error"]
    r = srv.http.get("/api/nothing")
    assert r.status_code == 404 and isinstance(r.json()["error"], str)
    r = srv.http.get("/v1/nothing")
    assert r.status_code == 404 and isinstance(r.json()["error"]["message"], str)
    assert srv.health()[0] == 200


# -- concurrency ---------------------------------------------------------------------------------

STARTS = [10, 20, 30, 40, 50, 60, 70, 80]


def test_eight_streaming_clients_four_requests_each_on_four_slots(srv):
    def client(n: int) -> list[tuple[int, str]]:
        out = []
        with httpx.Client(base_url=srv.url, timeout=300) as c:
            for _ in range(4):
                text = ""
                with c.stream("POST", "/v1/completions", json={
                        "model": ALIAS, "prompt": ", ".join(str(n + i) for i in range(5)) + ",", "max_tokens": 6,
                        "stream": True,
                        "temperature": 0}) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: ") and line != "data: [DONE]":
                            text += json.loads(line[6:])["choices"][0].get("text", "")
                    out.append((r.status_code, text))
        return out

    with ThreadPoolExecutor(8) as ex:
        results = dict(zip(STARTS, ex.map(client, STARTS)))
    for n, answers in results.items():
        assert len(answers) == 4
        for status, text in answers:
            assert status == 200
            assert text.strip().startswith(str(n + 5)), (n, text)  # "40, 41, 42, 43, 44," counts on with 45
    assert srv.health()[0] == 200 and srv.processing() == 0


def test_client_disconnect_mid_stream_frees_its_slot(srv):
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        with c.stream("POST", "/v1/completions", json={"model": ALIAS, "prompt": "Once upon a time",
                                                        "max_tokens": 400, "stream": True,
                                                        "ignore_eos": True}) as r:
            seen = 0
            for line in r.iter_lines():
                seen += line.startswith("data: ")
                if seen >= 3:
                    break
    deadline = time.monotonic() + 20
    while srv.processing() != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert srv.processing() == 0  # stopped long before 400 tokens


def test_ollama_stream_client_gone_before_the_first_byte_frees_its_slot(srv):
    # the request goes out and the socket closes at once, before any byte of the answer.
    # Left alone, greedy SmolLM2 writes all 400 tokens of this raw prompt ("length").
    body = json.dumps({"model": ALIAS, "prompt": "Once upon a time", "raw": True, "stream": True,
                       "options": {"num_predict": 400, "temperature": 0}}).encode()
    before, decodes = srv.metric("tokens_predicted_total"), srv.metric("n_decode_total")
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        s.sendall(b"POST /api/generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def active() -> int:
        return sum(r["active_requests"] for r in srv.health()[1]["runners"] if r["name"] == ALIAS)

    deadline = time.monotonic() + 60
    while srv.metric("n_decode_total") == decodes and time.monotonic() < deadline:  # it reached llama-server
        time.sleep(0.05)
    # llama-server itself may take seconds to mark the slot idle on a loaded machine
    deadline = time.monotonic() + 120
    while (active() or srv.processing()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (active(), srv.processing()) == (0, 0)
    assert srv.metric("tokens_predicted_total") - before < 400  # stopped, not finished


def test_a_model_without_a_chat_template_is_warned_about(srv, require_engine, model_file, tmp_path):
    # Gemma-3-270M's GGUF is the base model: no tokenizer.chat_template, so llama-server would
    # format chat requests as ChatML without a word; SmolLM2-Instruct has a template
    model_file("gemma3-270m")
    s = Server("gemma3-270m", tmp_path, "-c", "512", "-np", "1")
    try:
        assert "gemma3-270m: the GGUF has no chat template (tokenizer.chat_template)" in s.log(), s.log()[-2000:]
    finally:
        s.stop()
    assert "has no chat template" not in srv.log()


def test_a_non_streaming_call_is_cancelled_when_its_client_leaves():
    # the front's side of "a client that leaves frees its slot" for whole answers: the call to
    # llama-server is cancelled (its connection closed unread, which llama-server takes as a
    # cancel) as soon as the ASGI server reports http.disconnect, and ClientLeft is raised
    from starlette.requests import Request

    from tqgguf.server.proxy import ClientLeft, until_disconnect

    async def scenario(leave_after: float | None) -> tuple[str, bool]:
        messages: asyncio.Queue = asyncio.Queue()
        cancelled = False

        async def receive():
            return await messages.get()

        async def generate() -> str:
            nonlocal cancelled
            try:
                await asyncio.sleep(0.5)
                return "answer"
            except asyncio.CancelledError:
                cancelled = True
                raise

        request = Request({"type": "http", "method": "POST", "path": "/", "headers": []}, receive)
        if leave_after is not None:
            asyncio.get_running_loop().call_later(leave_after, messages.put_nowait, {"type": "http.disconnect"})
        try:
            return await until_disconnect(request, generate()), cancelled
        except ClientLeft:
            return "left", cancelled

    assert asyncio.run(scenario(0.05)) == ("left", True)
    assert asyncio.run(scenario(None)) == ("answer", False)
    assert asyncio.run(scenario(2.0)) == ("answer", False)  # the answer came first


def test_stream_cleanup_runs_when_the_first_send_fails():
    # an ASGI 2.4 server raises on the first send to a client that has gone: the body
    # iterator then never starts, and only the response itself can release the model

    from tqgguf.server.proxy import Stream

    events: list[str] = []

    async def body():
        try:
            events.append("started")
            yield b"x"
        finally:
            events.append("finally")

    async def cleanup():
        events.append("cleanup")

    async def send(message):
        raise OSError("the client has gone")

    async def receive():
        return {"type": "http.disconnect"}

    with pytest.raises(Exception):
        asyncio.run(Stream(body(), cleanup)({"type": "http", "asgi": {"spec_version": "2.4"}}, receive, send))
    assert events == ["cleanup"], events


def test_think_splitter_streams_what_the_whole_text_splits_into():
    from tqgguf.server.ollama import ThinkSplitter, split_thinking

    cases = {("<think>a b</think>\n\nThe answer", ""): ("a b", "The answer"),
             ("  <think>\nx</think>y", ""): ("x", "y"),
             ("plain <think>answer</think>", ""): ("", "plain <think>answer</think>"),
             ("<thi", ""): ("", "<thi"),
             ("<think>never closed", ""): ("never closed", ""),
             ("inside</think> after", "<|user|>hi<|assistant|><think>\n"): ("inside", "after")}
    for (text, prompt), want in cases.items():
        assert split_thinking(text, prompt) == want, text
        for i in range(len(text) + 1):  # every cut into three pieces, as a stream may deliver them
            for j in range(i, len(text) + 1):
                sp = ThinkSplitter(prompt)
                outs = [sp.feed(text[:i]), sp.feed(text[i:j]), sp.feed(text[j:]), sp.finish()]
                got = ("".join(o[0] for o in outs).strip(), "".join(o[1] for o in outs))
                assert got == want, (text, i, j, got)


# -- the child dies (last: it restarts the module's llama-server) ---------------------------------


def test_killing_the_child_mid_request_errors_the_client_and_restarts(srv):
    # an earlier refused request leaves a warning with "error" in the child's log; the lines
    # reported after the crash must still be the dying child's last ones, not that one
    with pytest.raises(openai.BadRequestError):
        srv.oa.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "hi"}], response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"properties": {"a": {"$ref": "#/nope"}}}}})
    _, h = srv.health()
    pid = [r for r in h["runners"] if r["name"] == ALIAS and r["kind"] == "chat"][0]["pid"]
    errors: list[BaseException] = []

    def request():
        try:
            for _ in srv.oa.completions.create(model=ALIAS, prompt="Once upon a time", max_tokens=400,
                                               stream=True, extra_body={"ignore_eos": True}):
                pass
        except (openai.APIError, httpx.HTTPError) as e:
            errors.append(e)

    t = threading.Thread(target=request)
    t.start()
    time.sleep(1.5)
    os.kill(pid, signal.SIGKILL)
    t.join(60)
    assert errors and "exited during the request" in str(errors[0])
    # the client can hear of the drop (~15 ms) before the supervisor has reaped the child
    # (~40 ms): wait for /health to report the restart, then for it to end
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        code, h = srv.health()
        if code == 200 and (seen or time.monotonic() > deadline - 55):
            break
        if code != 200:
            seen.append((code, h["status"], h.get("error", "")))
        time.sleep(0.05)
    assert seen and all(c == 503 and st == "restarting" for c, st, _ in seen), seen  # until it serves again
    assert any("died (killed by SIGKILL); restarting" in e for _, _, e in seen)
    runner = [r for r in h["runners"] if r["name"] == ALIAS and r["kind"] == "chat"][0]
    assert code == 200 and runner["restarts"] == 1 and runner["last_exit"] == "killed by SIGKILL"
    last = runner["last_log_lines"]
    # the dying child's last lines (its slots', at -lv 4), not the earlier refused request's error
    assert len(last) == 8 and "slot" in " ".join(last) and not any("error" in ln.lower() for ln in last), last
    assert f"last log lines: llama-server (killed by SIGKILL): {' | '.join(last)}" in srv.log()
    assert runner["pid"] != pid
    r = srv.oa.completions.create(model=ALIAS, prompt="Hello", max_tokens=4)
    assert r.choices[0].text


def test_sigterm_drains_requests_ends_streams_with_an_error_and_stops_the_child(model_path, wikitext, tmp_path):
    """SIGTERM while clients stream: a short request finishes in the grace period, the streams
    still running after it end with the API's error (OpenAI: an SSE error event the openai
    client raises; Ollama: an {"error"} line the ollama client raises), no traceback, the
    child stopped, the signal re-raised (exit by SIGTERM, uvicorn's convention)."""
    s = Server(ALIAS, tmp_path, "-c", "8192", "-np", "3")  # SmolLM2-135M's training context
    kids = _children(s.proc.pid)
    assert len(kids) == 1
    got: dict[str, list[float]] = {"openai": [], "ollama": []}
    errors: dict[str, BaseException] = {}
    short: list = []

    def openai_stream():
        try:
            for _ in s.oa.completions.create(model=ALIAS, prompt="Once upon a time", max_tokens=4000, stream=True,
                                             extra_body={"ignore_eos": True}):
                got["openai"].append(time.monotonic())
        except Exception as e:  # noqa: BLE001 - the assertion below says which
            errors["openai"] = e

    def ollama_stream():  # greedy continuation of WikiText: no end of text within the grace period
        try:
            for _ in s.ol.generate(model=ALIAS, prompt=wikitext.content[:2000], raw=True, stream=True,
                                   options={**GREEDY, "num_predict": 4000}):
                got["ollama"].append(time.monotonic())
        except Exception as e:  # noqa: BLE001
            errors["ollama"] = e

    threads = [threading.Thread(target=openai_stream), threading.Thread(target=ollama_stream)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while not (got["openai"] and got["ollama"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    # a short request, in flight at SIGTERM or (on a loaded machine, where a second may pass
    # before the signal) just done: either way it gets its whole answer
    quick = threading.Thread(target=lambda: short.append(s.oa.completions.create(
        model=ALIAS, prompt="Hello", max_tokens=2, extra_body={"ignore_eos": True})))
    quick.start()
    time.sleep(1.0)
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    for t in (*threads, quick):
        t.join(60)
    rc = s.proc.wait(timeout=30)
    log = s.log()
    s.stop()
    assert short and short[0].usage.completion_tokens == 2  # finished, within the grace period if it was running
    for api, err_type in (("openai", openai.APIError), ("ollama", ollama.ResponseError)):
        assert isinstance(errors.get(api), err_type), (api, errors.get(api), log[-3000:])
        assert "tqgguf serve is shutting down (SIGTERM)" in str(errors[api]) and "grace period" in str(errors[api])
        assert any(t > t0 + 1 for t in got[api]), f"{api}: the stream did not go on in the grace period"
        assert max(got[api]) < t0 + 9
    assert "Traceback" not in log and "Cancel" not in log, log[-3000:]
    assert re.search(r"shutting down \(SIGTERM\): new requests get 503; [23] running request\(s\) have 5 s", log)
    assert "cutting 2 request(s) still running 5 s after SIGTERM" in log
    assert rc == -signal.SIGTERM  # uvicorn re-raises the signal after the graceful shutdown
    assert not Path(f"/proc/{kids[0]}").exists() or "Z" in Path(f"/proc/{kids[0]}/stat").read_text().split()[2]


@pytest.mark.engine
def test_ctrl_c_stops_gracefully_and_exits_130_without_aborted(model_path, tmp_path):
    """SIGINT (Ctrl-C) with SIGINT at its default disposition, as in an interactive shell (a
    child of a background shell would inherit SIG_IGN; preexec_fn restores SIG_DFL): the
    graceful shutdown runs, the child is stopped, and the exit status is 130 with no click
    "Aborted!" (which exits 1)."""
    port = _free_port()
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(_serve_cmd(str(model_path), "--port", str(port), "-t", "1", "-c", "256"),
                                stdout=out, stderr=subprocess.STDOUT, env=_clean_env(),
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            deadline = time.monotonic() + 120
            while "Application startup complete" not in log_path.read_text(errors="replace"):
                assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text(errors="replace")
                time.sleep(0.2)
            kids = _children(proc.pid)
            proc.send_signal(signal.SIGINT)
            rc = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    log = log_path.read_text(errors="replace")
    assert rc == 130, log[-3000:]
    assert "Aborted!" not in log and "Traceback" not in log, log[-3000:]
    assert "shutting down (SIGINT)" in log, log[-3000:]
    assert all(not Path(f"/proc/{k}").exists() or "Z" in Path(f"/proc/{k}/stat").read_text().split()[2] for k in kids)


@pytest.mark.engine
def test_serve_killed_outright_leaves_no_llama_server(model_path, tmp_path):
    """SIGKILL to tqgguf serve: the kernel kills its children (PR_SET_PDEATHSIG = SIGKILL; with
    SIGTERM an embeddings child was seen hanging in llama-server's handler, orphaned)."""
    s = Server(ALIAS, tmp_path)
    r = s.http.post("/api/embed", json={"model": ALIAS, "input": "hello"})  # starts the embeddings child
    assert r.status_code == 200, r.text
    r = s.http.post("/api/generate", json={"model": ALIAS, "prompt": "hi", "stream": False, "options": {"num_predict": 2}})
    assert r.status_code == 200, r.text
    kids = _children(s.proc.pid)
    assert len(kids) == 2
    s.proc.kill()
    s.proc.wait(timeout=30)
    deadline = time.monotonic() + 20
    alive = kids
    while alive and time.monotonic() < deadline:
        alive = [k for k in kids if Path(f"/proc/{k}").exists() and "Z" not in Path(f"/proc/{k}/stat").read_text().split()[2]]
        time.sleep(0.2)
    s.stop()
    assert not alive, f"llama-server children left after tqgguf serve was killed: {alive}"


# -- CLI: refused before or at loading -------------------------------------------------------------


@pytest.mark.engine
def test_port_in_use_is_a_clear_error_before_loading(model_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        p = subprocess.run(_serve_cmd(str(model_path), "--port", str(port)), capture_output=True, text=True,
                           env=_clean_env(), timeout=60)
    assert p.returncode == 1
    assert f"port {port} is already in use" in p.stderr and "starting llama-server" not in p.stderr


@pytest.mark.engine
def test_child_port_in_use_is_a_clear_error(model_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        p = subprocess.run(_serve_cmd(str(model_path), "--port", str(_free_port())), capture_output=True, text=True,
                           env=_clean_env(TQGGUF_LLAMA_SERVER_PORT=str(port)), timeout=60)
    assert p.returncode == 1
    assert f"llama-server's port {port} on 127.0.0.1 is already in use" in p.stderr


def test_a_max_context_below_the_served_context_is_refused(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    p = subprocess.run(_serve_cmd(str(gguf), "-c", "4096", "--max-ctx", "10"), capture_output=True, text=True,
                       env=_clean_env(), timeout=60)
    assert p.returncode == 2
    assert "max_context 10 (flag --max-ctx) is below the context every slot is served with, 4096 (flag -c)" in p.stderr
    p = subprocess.run(_serve_cmd(str(gguf), "-c", "4096"), capture_output=True, text=True,
                       env=_clean_env(TQGGUF_MAX_CONTEXT_LENGTH="2048"), timeout=60)
    assert p.returncode == 2 and "max_context 2048 (env TQGGUF_MAX_CONTEXT_LENGTH" in p.stderr


@pytest.mark.engine
def test_a_context_above_the_training_context_is_refused_not_capped(model_path):
    """llama-server holds every slot to the model's training context (SmolLM2-135M: 8192), so serve -c 16384 would
    allocate 16384 cells and answer 8192: refused before the child starts, naming where the value came from; a
    request's num_ctx is held to the same limit (Manager.max_context, the startup lines' test)."""
    for extra, env, src in ((["-c", "16384"], {}, "(flag -c)"), ([], {"OLLAMA_CONTEXT_LENGTH": "9000"},
                                                                 "(env OLLAMA_CONTEXT_LENGTH)")):
        p = subprocess.run(_serve_cmd(str(model_path), "--port", str(_free_port()), *extra), capture_output=True,
                           text=True, env=_clean_env(**env), timeout=60)
        assert p.returncode == 2, p.stderr
        assert f"tokens a slot {src} is more than {model_path.name}'s training context, 8192 tokens" in p.stderr
        assert "give -c 8192 or less" in p.stderr and "starting llama-server" not in p.stderr


def test_llama_server_missing_tells_to_run_build(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    p = subprocess.run(_serve_cmd(str(gguf), "--port", str(_free_port())), capture_output=True, text=True,
                       env=_clean_env(TQGGUF_CACHE=str(tmp_path / "empty")), timeout=60)
    assert p.returncode == 1 and "no llama-server found" in p.stderr and "run `tqgguf build`" in p.stderr
    p = subprocess.run(_serve_cmd(str(gguf)), capture_output=True, text=True,
                       env=_clean_env(TQGGUF_LLAMA_SERVER=str(tmp_path / "nope")), timeout=60)
    assert p.returncode == 2 and "TQGGUF_LLAMA_SERVER" in p.stderr and "is not an executable file" in p.stderr


@pytest.mark.engine
def test_a_model_llama_server_refuses_gives_its_message_not_a_timeout(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
    t0 = time.monotonic()
    p = subprocess.run(_serve_cmd(str(bad), "--port", str(_free_port())), capture_output=True, text=True,
                       env=_clean_env(), timeout=120)
    assert p.returncode == 1 and time.monotonic() - t0 < 60
    # refused by the GGUF header reader (K centering auto and layer plans read the header before
    # llama-server starts) or by llama-server itself: either way its reason, exit 1, no traceback
    assert "cannot serve broken.gguf:" in p.stderr and "Traceback" not in p.stderr
    assert any(m in p.stderr for m in ("failed to load model", "error loading model", "as a GGUF"))


@pytest.mark.engine
def test_gpu_layers_on_a_cpu_only_llama_server_are_refused(model_path):
    from tqgguf.builder.driver import llama_server_path

    if "tools-cpu" not in str(llama_server_path()):
        pytest.skip("the llama-server found is not the CPU build")
    p = subprocess.run(_serve_cmd(str(model_path), "--port", str(_free_port()), "-ngl", "99"), capture_output=True,
                       text=True, env=_clean_env(), timeout=60)
    assert p.returncode == 2 and "lists no GPU device" in p.stderr and "starting llama-server" not in p.stderr  # a usage error, as in ppl/bench/sweep/mix


@pytest.mark.engine
@pytest.mark.parametrize("args,env", [(["-np", "2"], {}), ([], {"TQGGUF_NUM_PARALLEL": "3"})])
def test_k_center_full_with_several_slots_is_refused_before_llama_server_starts(model_file, args, env):
    """Explicit --k-center full on a model with a K bias and -np > 1: refused up front (exit 2)
    naming -np and the alternatives in tqgguf's spelling, not llama-server's death with the
    engine's "use bias or file:PATH"."""
    p = subprocess.run(_serve_cmd(str(model_file(QWEN)), "--port", str(_free_port()), "--ctk", "turbo4",
                                  "--k-center", "full", *args), capture_output=True, text=True,
                       env=_clean_env(**env), timeout=120)
    n = args[1] if args else env["TQGGUF_NUM_PARALLEL"]
    assert p.returncode == 2, p.stderr
    assert f"--k-center full cannot serve qwen2.5-coder-0.5b-instruct-q4_k_m.gguf with -np {n}" in p.stderr, p.stderr
    assert "use --k-center bias, bias:N, calib, calib:FILE or off (auto picks bias here), or -np 1" in p.stderr, p.stderr
    assert "starting llama-server" not in p.stderr and "file:PATH" not in p.stderr, p.stderr


@pytest.mark.parametrize("args,env,needle", [
    (["--ctk", "q9"], {}, "--ctk 'q9': unknown cache type; allowed: f32"),
    ([], {"TQGGUF_KV_CACHE_TYPE": "turbo5"}, "TQGGUF_KV_CACHE_TYPE='turbo5': unknown cache type"),
    ([], {"OLLAMA_KV_CACHE_TYPE": "fp8"}, "OLLAMA_KV_CACHE_TYPE='fp8'"),
    (["-fa", "off", "--ctv", "turbo4"], {}, "flash attention is off (from flag -fa='off')"),
    (["-np", "0"], {}, "-np '0'"),
    ([], {"TQGGUF_HOST": "localhost:70000"}, "TQGGUF_HOST='localhost:70000'"),
    ([], {"OLLAMA_MAX_LOADED_MODELS": "-1"}, "OLLAMA_MAX_LOADED_MODELS='-1'"),  # 0 is auto, as Ollama
    (["--max-ctx", "-5"], {}, "--max-ctx '-5'"),
])
def test_bad_cli_settings_exit_2_before_loading_the_model(args, env, needle):
    p = subprocess.run(_serve_cmd("no-such-model.gguf", *args), capture_output=True, text=True,
                       env=_clean_env(**env), timeout=60)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr
    assert "starting llama-server" not in p.stderr and "no-such-model" not in p.stderr


# -- the pieces, without a server -----------------------------------------------------------------


def test_ollama_options_map_to_llama_server_fields_and_check_load_option_types():
    from tqgguf.server.ollama import RequestError, options

    fields, load = options({"options": {"temperature": 0, "num_predict": 7, "stop": "x", "num_ctx": 4096,
                                        "num_gpu": 99.0, "use_mmap": False, "num_thread": None}})
    assert fields["temperature"] == 0 and fields["n_predict"] == 7 and fields["stop"] == ["x"]
    assert fields["top_p"] == 0.9 and fields["repeat_penalty"] == 1.1  # Ollama's defaults, not llama-server's
    assert load == {"num_ctx": 4096, "num_gpu": 99, "use_mmap": False}  # a whole float is an integer; null: skipped
    assert "num_gpu" not in fields and "num_ctx" not in fields
    for bad, needle in [({"temprature": 1}, "unknown option"), ({"top_k": "40"}, "must be a number"),
                        ({"num_ctx": 0}, "at least 64 \\(tokens per slot\\)"), ({"num_batch": 1.5}, "options.num_batch 1.5 must be"),
                        ({"use_mmap": 1}, "options.use_mmap 1 must be true or false"),
                        ({"num_gpu": -2}, "at least -1")]:
        with pytest.raises(RequestError, match=needle):
            options({"options": bad})


def test_load_plan_names_the_option_the_value_and_what_the_server_runs_with(model_path):

    from tqgguf.config import resolve_settings
    from tqgguf.server.load_options import LoadOptionRefused
    from tqgguf.server.manager import Manager
    from tqgguf.server.modelfile import ModelFile
    from tqgguf.server.runner import Runner
    from tqgguf.server.serveconfig import ServeConfig

    settings = resolve_settings({"cache_type_k": "f16", "cache_type_v": "f16", "context_length": 256,
                                 "num_parallel": 2}, {})
    cfg = ServeConfig(model_path=model_path, alias=ALIAS, settings=settings, llama_server=Path("/nonexistent"),
                      n_threads=4)
    m = Manager(cfg)
    r = Runner(ModelFile(ALIAS, model_path), "chat", cfg, 256, 0)
    plan = lambda o: asyncio.run(m.plan_load(r, o))  # noqa: E731
    assert r.effective("num_batch") == 512  # -b 2048 clamped to the whole context, 256 x 2 slots
    assert plan({"num_batch": 512, "num_thread": 4, "f16_kv": True, "num_gpu": 0, "num_ctx": 99}) == (r.load, [])
    params, changes = plan({"num_batch": 64, "use_mmap": False, "num_thread": 1})
    assert (params.n_batch, params.use_mmap, params.n_threads) == (64, False, 1)
    assert changes == ["num_batch 64", "use_mmap false", "num_thread 1"]
    assert plan({"num_thread": 512})[0].n_threads == 512  # GGML_MAX_N_THREADS; one more crashes llama-server
    with pytest.raises(LoadOptionRefused, match=r"options.num_thread 100000: ggml runs 1 to 512 CPU threads") as ei:
        plan({"num_thread": 100000})
    assert ei.value.option == "num_thread"
    assert r.effective("num_gpu") == 0 and r.model.n_layer() == 30
    with pytest.raises(LoadOptionRefused, match="lists no GPU device") as ei:  # the binary cannot be asked: no GPU
        plan({"num_gpu": 31})
    assert ei.value.option == "num_gpu"
    e = Runner(ModelFile(ALIAS, model_path), "embed", cfg, 256, 0)
    with pytest.raises(LoadOptionRefused, match="options.num_batch 64: this server runs .* with num_batch 256 for "
                                                "embeddings"):
        asyncio.run(m.plan_load(e, {"num_batch": 64}))


@pytest.mark.parametrize("flags,env,slots,num_ctx", [
    ({}, {}, "4096 tokens each (from default;", "up to 8192 tokens per slot (from the model's training context)"),
    ({}, {"OLLAMA_CONTEXT_LENGTH": "2048"}, "2048 tokens each (from env OLLAMA_CONTEXT_LENGTH;",
     "up to 8192 tokens per slot (from the model's training context)"),
    ({"context_length": "8192"}, {"OLLAMA_CONTEXT_LENGTH": "2048"}, "8192 tokens each (from flag -c;",
     "up to 8192 tokens per slot (from the context length, flag -c)"),
    ({}, {"TQGGUF_MAX_CONTEXT_LENGTH": "20000"}, "4096 tokens each (from default;",
     "up to 8192 tokens per slot (from the model's training context, where llama-server caps every slot)"),
    ({"context_length": "1024"}, {"TQGGUF_MAX_CONTEXT_LENGTH": "512"}, "1024 tokens each (from flag -c;",
     "up to 1024 tokens per slot (from the context length, flag -c)"),
    ({}, {"TQGGUF_MAX_CONTEXT_LENGTH": "6000"}, "4096 tokens each (from default;",
     "up to 6000 tokens per slot (from env TQGGUF_MAX_CONTEXT_LENGTH)"),
])
def test_startup_lines_say_where_the_context_and_its_maximum_come_from(model_path, flags, env, slots, num_ctx):
    from tqgguf.config import resolve_settings
    from tqgguf.server.run import startup_summary
    from tqgguf.server.manager import Manager
    from tqgguf.server.runner import Runner
    from tqgguf.server.serveconfig import ServeConfig

    settings = resolve_settings(flags, env)
    cfg = ServeConfig(model_path=model_path, alias=ALIAS, settings=settings, llama_server=Path("/x/llama-server"))
    m = Manager(cfg)
    lines = startup_summary(cfg, m, Runner(m.default, "chat", cfg, settings.context_length, 0))
    assert any(slots in ln for ln in lines), lines
    assert any(num_ctx in ln for ln in lines), lines


def test_a_model_loaded_by_name_runs_with_at_most_its_training_context(model_path, caplog):
    """serve refuses a -c above the training context of the model it starts with; another model, loaded by name,
    whose training context is below serve's -c runs with its training context (llama-server would hold the slot
    there anyway), said once in the log, and num_ctx is held to the same limit."""
    from tqgguf.config import resolve_settings
    from tqgguf.server.manager import Manager
    from tqgguf.server.modelfile import ModelFile
    from tqgguf.server.serveconfig import ServeConfig

    settings = resolve_settings({"context_length": "16384", "max_context": "20000"}, {})
    m = Manager(ServeConfig(model_path=model_path, alias=ALIAS, settings=settings, llama_server=Path("/x/llama-server")))
    other = ModelFile("other", model_path)  # SmolLM2-135M: trained with 8192
    with caplog.at_level("WARNING", logger="tqgguf.server"):
        assert (m.default_ctx(other), m.default_ctx(other), m.max_context(other)) == (8192, 8192, 8192)
    held = [r.getMessage() for r in caplog.records if "above its training context" in r.getMessage()]
    assert held == ["other: the default context, 16384 tokens a slot, is above its training context; served with "
                    "8192 (llama-server holds every slot there, as Ollama holds num_ctx)"], held
    assert m.max_context_source(other) == "the model's training context, where llama-server caps every slot"


def test_plain_json_tool_calls_are_recognised_only_for_offered_tools():
    from tqgguf.server.ollama import tool_calls_from_text

    calls = tool_calls_from_text('{"name": "get_weather", "arguments": {"city": "Paris"}}', {"get_weather"})
    assert calls and calls[0]["function"]["name"] == "get_weather"
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}
    fenced = tool_calls_from_text('```json\n[{"name": "a", "arguments": {}}, {"name": "b"}]\n```', {"a", "b"})
    assert [c["function"]["name"] for c in fenced] == ["a", "b"]
    assert tool_calls_from_text('{"name": "rm_rf", "arguments": {}}', {"get_weather"}) is None
    assert tool_calls_from_text("The weather is fine.", {"get_weather"}) is None


@pytest.mark.engine
def test_gguf_header_reader_agrees_with_gguf_py(model_path):
    from gguf import GGUFReader

    from tqgguf.server.modelfile import read_gguf_metadata

    ours = read_gguf_metadata(model_path)
    ref = GGUFReader(model_path, "r")
    for key in ("general.architecture", "llama.context_length", "llama.block_count", "general.file_type",
                "tokenizer.chat_template", "llama.rope.freq_base"):
        assert ours[key] == ref.fields[key].contents(), key
    assert "tokenizer.ggml.tokens" not in ours  # the vocabulary is skipped


def test_child_command_line_carries_every_setting():
    from tqgguf.server.child import ChildSpec

    spec = ChildSpec(binary=Path("/x/llama-server"), model=Path("/m.gguf"), alias="m", n_ctx=1024, n_parallel=4,
                     ctk="q8_0", ctv="turbo4", flash_attn="on", n_gpu_layers=-1, n_threads=3)
    a = spec.argv(5000)
    def val(flag: str) -> str:
        return a[a.index(flag) + 1]

    assert [val(f) for f in ("-c", "-np", "-ctk", "-ctv", "-fa", "-ngl", "-t", "--host", "--port", "-fit")] == \
        ["4096", "4", "q8_0", "turbo4", "on", "all", "3", "127.0.0.1", "5000", "off"]  # -c: total over the slots
    assert "-b" not in a and "-lm" not in a  # llama-server's defaults unless a request's options change them
    b = ChildSpec(binary=Path("/x/llama-server"), model=Path("/m.gguf"), alias="m", n_ctx=1024, n_batch=256,
                  use_mmap=False).argv(5000)
    # use_mmap false: this llama-server has no --no-mmap (it exits "invalid argument"); -lm none reads the model in
    assert b[b.index("-b") + 1] == "256" and b[b.index("-lm") + 1] == "none" and "--no-mmap" not in b
    e = ChildSpec(binary=Path("/x/llama-server"), model=Path("/m.gguf"), alias="m", n_ctx=1024, n_parallel=4,
                  embedding=True).argv(5001)
    assert "--embeddings" in e and e[e.index("-np") + 1] == "1" and e[e.index("-ub") + 1] == "1024"
    assert e[e.index("--pooling") + 1] == "mean"
