"""``tqgguf serve`` as a user runs it: a real server process on 127.0.0.1 and a real HTTP
client (httpx), with SmolLM2-135M (head dim 64) and turbo KV caches.

Three servers, each started once per module:
- turbo: ``--ctk q8_0 --ctv turbo4 -c 1024 -np 2`` (APIs, streaming, parallel, bad input)
- f16: ``-c 1024`` f16/f16 (the reference for greedy token agreement)
- shift: ``--ctk turbo4 --ctv turbo4 -c 256 --keep-alive 2s`` (context shift, keep-alive)

Engine tests are marked ``engine`` (skipped without the built engine, failing instead
with TQGGUF_REQUIRE_ENGINE=1, see conftest). The CLI checks that must fail before any
model is loaded run without the engine.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tqgguf.config import VARIABLES

ALIAS = "smollm2-135m"
# SmolLM2-135M: 30 layers, 3 KV heads of dim 64 (DESIGN.md)
N_LAYER, N_EMBD_KV = 30, 3 * 64


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


@pytest.fixture(scope="module")
def model_path(require_engine, model_file) -> Path:
    return model_file(ALIAS)


class Server:
    """A ``tqgguf serve`` subprocess; ``log()`` is its stderr so far."""

    def __init__(self, model: Path, tmp: Path, *args: str, env: dict[str, str] | None = None):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"serve-{self.port}.log"
        self._log = open(self.log_path, "wb")
        # one thread per slot: on a small shared machine ggml's spinning threads otherwise
        # fight each other and the other server
        self.proc = subprocess.Popen(_serve_cmd(str(model), "--alias", ALIAS, "--port", str(self.port), "-t", "1",
                                                *args),
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env or _clean_env())
        self.client = httpx.Client(base_url=self.url, timeout=120)
        deadline = time.monotonic() + 90
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if self.client.get("/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server did not come up:\n{self.log()}")
            time.sleep(0.2)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self) -> dict:
        r = self.client.get("/health")
        assert r.status_code == 200
        return r.json()

    def wait_idle(self, timeout: float = 10.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            h = self.health()
            if h["slots_processing"] == 0 or time.monotonic() > deadline:
                return h
            time.sleep(0.1)

    def generate_tokens(self, prompt: str, n: int = 32) -> list[int]:
        """Greedy continuation of a raw prompt as token ids (Ollama's ``context``)."""
        r = self.client.post("/api/generate", json={
            "model": ALIAS, "prompt": prompt, "raw": True, "stream": False,
            "options": {"temperature": 0, "repeat_penalty": 1.0, "num_predict": n}})
        assert r.status_code == 200, r.text
        body = r.json()
        return body["context"][body["prompt_eval_count"]:]

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture(scope="module")
def turbo(model_path, tmp_path_factory):
    srv = Server(model_path, tmp_path_factory.mktemp("turbo"), "--ctk", "q8_0", "--ctv", "turbo4", "-c", "1024",
                 "-np", "2", "--keep-alive", "-1")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def f16(model_path, tmp_path_factory):
    srv = Server(model_path, tmp_path_factory.mktemp("f16"), "-c", "1024", "--keep-alive", "-1")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def shift(model_path, tmp_path_factory):
    srv = Server(model_path, tmp_path_factory.mktemp("shift"), "--ctk", "turbo4", "--ctv", "turbo4", "-c", "256",
                 "--keep-alive", "2s")
    yield srv
    srv.stop()


def _chat(content: str, **kw) -> dict:
    return {"model": ALIAS, "messages": [{"role": "user", "content": content}], **kw}


def _sse_events(text: str) -> list:
    out = []
    for block in text.split("\n\n"):
        block = block.strip()
        if not block:
            continue
        assert block.startswith("data: "), block
        data = block[len("data: "):]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def _rfc3339(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))


OLLAMA_FINAL_FIELDS = {"total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration",
                       "eval_count", "eval_duration"}


# -- startup ------------------------------------------------------------------------------


@pytest.mark.engine
def test_startup_log_states_types_rotation_fa_kv_mib_context_and_slots(turbo):
    from tqgguf.cachetypes import type_info

    log = turbo.log()
    assert "K q8_0 (from flag --ctk), V turbo4 (from flag --ctv)" in log
    assert "attn_rot_k = 1, attn_rot_v = 1" in log
    assert "flash attention: enabled (asked auto, from default)" in log
    assert "slots: 2 (from flag -np), each an independent context of 1024 tokens" in log
    # KV bytes are the format's bits/value: layers x KV width x cells x bytes/value
    mib = {t: N_LAYER * N_EMBD_KV * 1024 * type_info(t).type_size / type_info(t).block_size / 2**20
           for t in ("q8_0", "turbo4")}
    per_slot = mib["q8_0"] + mib["turbo4"]
    m = re.search(r"KV memory: ([\d.]+) MiB per slot \(K ([\d.]+) \+ V ([\d.]+)\), ([\d.]+) MiB total for 2 slot", log)
    assert m, log
    per, k, v, total = map(float, m.groups())
    assert (k, v) == (pytest.approx(mib["q8_0"], abs=0.006), pytest.approx(mib["turbo4"], abs=0.006))
    assert per == pytest.approx(per_slot, abs=0.011) and total == pytest.approx(2 * per, abs=0.011)
    meta = turbo.client.get("/v1/models").json()["data"][0]
    assert meta["id"] == ALIAS
    assert (meta["meta"]["cache_type_k"], meta["meta"]["cache_type_v"], meta["meta"]["slots"]) == ("q8_0", "turbo4", 2)
    assert meta["meta"]["kv_mib_total"] == pytest.approx(2 * per_slot, abs=0.02)


# -- OpenAI API ---------------------------------------------------------------------------


@pytest.mark.engine
def test_chat_completion_returns_text(turbo):
    r = turbo.client.post("/v1/chat/completions", json=_chat("What is the capital of France?", max_tokens=48,
                                                             temperature=0))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == ALIAS
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert len(choice["message"]["content"].strip()) > 0
    assert choice["finish_reason"] in ("stop", "length")
    u = body["usage"]
    assert u["prompt_tokens"] > 5 and 0 < u["completion_tokens"] <= 48
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]


@pytest.mark.engine
def test_chat_streaming_returns_chunks_then_a_final_stop_and_matches_the_plain_answer(turbo):
    req = _chat("What is 2 plus 2? Answer in one short sentence.", max_tokens=200, temperature=0)
    plain = turbo.client.post("/v1/chat/completions", json=req).json()["choices"][0]["message"]["content"]
    r = turbo.client.post("/v1/chat/completions",
                          json={**req, "stream": True, "stream_options": {"include_usage": True}})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if e["choices"]]
    assert all(e["object"] == "chat.completion.chunk" for e in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = [c["choices"][0]["delta"].get("content", "") for c in chunks]
    assert sum(1 for c in content if c) >= 2
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert "".join(content) == plain
    usage = [e for e in events[:-1] if not e["choices"]][0]["usage"]
    assert usage["completion_tokens"] >= sum(1 for c in content if c)


@pytest.mark.engine
def test_text_completion_plain_and_streaming(turbo):
    req = {"model": ALIAS, "prompt": "The three primary colors are", "max_tokens": 12, "temperature": 0}
    r = turbo.client.post("/v1/completions", json=req)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion" and body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 12
    s = turbo.client.post("/v1/completions", json={**req, "stream": True})
    events = _sse_events(s.text)
    assert events[-1] == "[DONE]"
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == body["choices"][0]["text"]
    assert events[-2]["choices"][0]["finish_reason"] == "length"


# -- Ollama API ---------------------------------------------------------------------------


@pytest.mark.engine
def test_ollama_chat_answers_in_ollamas_shape(turbo):
    req = _chat("Name a fruit.", stream=False, options={"temperature": 0, "num_predict": 24})
    r = turbo.client.post("/api/chat", json=req)
    assert r.status_code == 200, r.text
    b = r.json()
    assert b["model"] == ALIAS and _rfc3339(b["created_at"]).tzinfo is not None
    assert b["message"]["role"] == "assistant" and b["message"]["content"].strip()
    assert b["done"] is True and b["done_reason"] in ("stop", "length")
    assert OLLAMA_FINAL_FIELDS <= set(b) and all(isinstance(b[k], int) for k in OLLAMA_FINAL_FIELDS)
    assert 0 < b["eval_count"] <= 24 and b["prompt_eval_count"] > 0
    assert b["total_duration"] >= b["eval_duration"] > 0

    # streaming is Ollama's default: NDJSON, one object per line, the last one done
    s = turbo.client.post("/api/chat", json={k: v for k, v in req.items() if k != "stream"})
    assert s.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(x) for x in s.text.splitlines() if x.strip()]
    assert all(x["done"] is False and x["message"]["role"] == "assistant" for x in lines[:-1])
    final = lines[-1]
    assert final["done"] is True and final["done_reason"] == b["done_reason"] and OLLAMA_FINAL_FIELDS <= set(final)
    assert "".join(x["message"]["content"] for x in lines) == b["message"]["content"]
    assert final["eval_count"] == b["eval_count"]


@pytest.mark.engine
def test_ollama_generate_answers_in_ollamas_shape(turbo):
    req = {"model": ALIAS, "prompt": "Why is the sky blue?", "stream": False,
           "options": {"temperature": 0, "num_predict": 16}}
    r = turbo.client.post("/api/generate", json=req)
    assert r.status_code == 200, r.text
    b = r.json()
    assert b["model"] == ALIAS and b["done"] is True and b["done_reason"] in ("stop", "length")
    assert isinstance(b["response"], str) and b["response"].strip()
    assert OLLAMA_FINAL_FIELDS <= set(b)
    assert len(b["context"]) == b["prompt_eval_count"] + b["eval_count"]
    s = turbo.client.post("/api/generate", json={**req, "stream": True})
    lines = [json.loads(x) for x in s.text.splitlines() if x.strip()]
    assert all(x["done"] is False and "response" in x for x in lines[:-1])
    assert lines[-1]["done"] is True and lines[-1]["context"] == b["context"]
    assert "".join(x["response"] for x in lines) == b["response"]
    # an empty prompt only loads the model, as in Ollama
    load = turbo.client.post("/api/generate", json={"model": ALIAS}).json()
    assert load["done"] is True and load["done_reason"] == "load"


@pytest.mark.engine
def test_ollama_version_tags_ps_and_show(turbo):
    assert "version" in turbo.client.get("/api/version").json()
    tags = turbo.client.get("/api/tags").json()["models"]
    assert [m["name"] for m in tags] == [f"{ALIAS}:latest"]
    m = tags[0]
    assert m["size"] > 50_000_000 and len(m["digest"]) == 64 and _rfc3339(m["modified_at"])
    assert m["details"]["format"] == "gguf" and m["details"]["family"] == "llama"
    assert m["details"]["quantization_level"] == "Q4_1"
    ps = turbo.client.get("/api/ps").json()["models"]
    assert ps and ps[0]["name"] == f"{ALIAS}:latest"
    show = turbo.client.post("/api/show", json={"model": f"{ALIAS}:latest"}).json()
    assert show["details"]["family"] == "llama" and "im_start" in show["template"]
    assert show["tqgguf"]["cache_type_v"] == "turbo4"


# -- quality ------------------------------------------------------------------------------

PROMPTS = [
    "The history of the Roman Empire",
    "In mathematics, a prime number is",
    "def fibonacci(n):",
    "The quick brown fox",
    "Water boils at",
    "Once upon a time in a small village,",
    "The main ingredients of bread are",
    "Photosynthesis is the process by which",
]


def _leading_match(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@pytest.mark.engine
def test_greedy_32_tokens_q8_0_turbo4_match_f16(turbo, f16, record_property):
    with ThreadPoolExecutor(2) as ex:  # the two servers work at the same time
        refs = ex.submit(lambda: [f16.generate_tokens(p) for p in PROMPTS])
        gots = ex.submit(lambda: [turbo.generate_tokens(p) for p in PROMPTS])
        refs, gots = refs.result(), gots.result()
    matches = []
    for ref, got in zip(refs, gots):
        assert len(ref) == 32 or ref == got  # both stop at the same EOS, or run the full 32
        matches.append(len(ref) if ref == got else _leading_match(ref, got))
    record_property("leading_token_matches", matches)
    print(f"\nq8_0/turbo4 vs f16/f16, greedy 32 tokens, leading matches per prompt: {matches} "
          f"(median {statistics.median(matches)}, {sum(m == 32 for m in matches)}/{len(matches)} identical)")
    # near-ties decide the first tokens of some prompts on this 135M model: q8_0/q8_0 and
    # q8_0/f16 part from f16 within 1-2 tokens on "The history of the Roman Empire" too
    assert statistics.median(matches) >= 8


# -- parallel -----------------------------------------------------------------------------

PARALLEL_PROMPTS = [
    "List of fruits: apple, banana,",
    "Days of the week: Monday, Tuesday,",
    "Counting in English: one, two, three,",
    "Colors of the rainbow: red, orange,",
]


def _complete(client: httpx.Client, prompt: str) -> httpx.Response:
    return client.post("/v1/completions", json={"model": ALIAS, "prompt": prompt, "max_tokens": 16,
                                                 "temperature": 0})


@pytest.mark.engine
def test_four_clients_three_requests_each_on_two_slots_without_cross_talk(turbo):
    solo = {}
    for p in PARALLEL_PROMPTS:
        r = _complete(turbo.client, p)
        assert r.status_code == 200
        solo[p] = r.json()["choices"][0]["text"]
    assert len(set(solo.values())) == len(solo), solo  # distinct answers, so cross-talk would show

    results: list[tuple[str, int, str]] = []
    errors: list[BaseException] = []
    busy_seen: list[int] = []
    lock = threading.Lock()
    done = threading.Event()

    def client(prompt: str) -> None:
        try:
            with httpx.Client(base_url=turbo.url, timeout=120) as c:
                for _ in range(3):
                    r = _complete(c, prompt)
                    text = r.json()["choices"][0]["text"] if r.status_code == 200 else r.text
                    with lock:
                        results.append((prompt, r.status_code, text))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def watch() -> None:
        with httpx.Client(base_url=turbo.url, timeout=30) as c:
            while not done.is_set():
                busy_seen.append(c.get("/health").json()["slots_processing"])
                time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(p,)) for p in PARALLEL_PROMPTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    done.set()
    watcher.join()
    assert not errors, errors
    print(f"\n4 clients x 3 requests on -np 2: {len(results)} responses in {elapsed:.1f} s, "
          f"max slots busy at once: {max(busy_seen)}")
    assert len(results) == 12 and all(status == 200 for _, status, _ in results)
    for prompt, _, text in results:
        assert text == solo[prompt], (prompt, text, solo[prompt])
    assert max(busy_seen) == 2  # both slots really worked at the same time
    h = turbo.wait_idle()
    assert h["status"] == "ok" and h["slots_idle"] == 2


# -- bad input ----------------------------------------------------------------------------

MSGS = [{"role": "user", "content": "hi"}]
BAD_REQUESTS = [
    ("/v1/chat/completions", b"{not json", 400, "malformed JSON"),
    ("/v1/chat/completions", b"", 400, "empty"),
    ("/v1/chat/completions", b"[1, 2]", 400, "JSON object"),
    ("/v1/chat/completions", {"model": ALIAS}, 400, "messages: field required"),
    ("/v1/chat/completions", {"messages": "hi"}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 42}]}, 400, "content"),
    ("/v1/chat/completions", {"messages": MSGS, "max_tokens": -5}, 400, "max_tokens"),
    ("/v1/chat/completions", {"messages": MSGS, "max_tokens": "10"}, 400, "max_tokens"),
    ("/v1/chat/completions", {"messages": MSGS, "temperature": "hot"}, 400, "temperature"),
    ("/v1/chat/completions", {"messages": MSGS, "stream": "yes"}, 400, "stream"),
    ("/v1/chat/completions", {"messages": MSGS, "n": 3}, 400, "n > 1"),
    ("/v1/chat/completions", {"model": "gpt-4o", "messages": MSGS}, 404, "not found"),
    ("/v1/completions", {"prompt": 7}, 400, "prompt"),
    ("/v1/completions", {"prompt": [999999999]}, 400, "out of range"),
    ("/api/chat", b"{\"model\": ", 400, "malformed JSON"),
    ("/api/chat", {"messages": MSGS}, 400, "model: field required"),
    ("/api/chat", {"model": ALIAS}, 400, "messages: field required"),
    ("/api/chat", {"model": ALIAS, "messages": MSGS, "options": {"num_predict": -7}}, 400, "num_predict"),
    ("/api/chat", {"model": ALIAS, "messages": MSGS, "options": {"temperature": []}}, 400, "temperature"),
    ("/api/chat", {"model": ALIAS, "messages": MSGS, "keep_alive": "soon"}, 400, "keep_alive"),
    ("/api/chat", {"model": "llama3:8b", "messages": MSGS}, 404, "not found"),
    ("/api/generate", {"model": ALIAS, "prompt": "x", "format": "json"}, 400, "not supported"),
]


@pytest.mark.engine
@pytest.mark.parametrize("route,body,status,reason", BAD_REQUESTS,
                         ids=[f"{r}-{i}" for i, (r, *_ ) in enumerate(BAD_REQUESTS)])
def test_bad_request_gets_4xx_with_a_reason(turbo, route, body, status, reason):
    if isinstance(body, bytes):
        r = turbo.client.post(route, content=body, headers={"content-type": "application/json"})
    else:
        r = turbo.client.post(route, json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    msg = err if route.startswith("/api/") else err["message"]
    assert reason in msg
    assert turbo.health()["status"] == "ok"


@pytest.mark.engine
def test_huge_n_predict_is_clamped_to_the_context(turbo):
    r = turbo.client.post("/api/chat", json=_chat("Say OK.", stream=False,
                                                  options={"num_predict": 10**12, "temperature": 0}))
    assert r.status_code == 200, r.text
    limit = int(r.headers["x-tqgguf-max-tokens"])
    b = r.json()
    assert limit == 1024 - b["prompt_eval_count"]
    assert b["eval_count"] <= limit
    r = turbo.client.post("/v1/chat/completions", json=_chat("Say OK.", max_tokens=10**15, temperature=0))
    assert r.status_code == 200 and int(r.headers["x-tqgguf-max-tokens"]) < 1024


@pytest.mark.engine
def test_client_disconnect_mid_stream_frees_the_slot(turbo):
    with httpx.Client(base_url=turbo.url, timeout=60) as c:
        with c.stream("POST", "/v1/chat/completions",
                      json=_chat("Write a very long story about a dragon.", max_tokens=900, stream=True)) as r:
            got = 0
            for line in r.iter_lines():
                if line.startswith("data: "):
                    got += 1
                if got >= 4:
                    break  # leaving the block closes the connection mid-stream
    deadline = time.monotonic() + 10
    while turbo.health()["slots_idle"] != 2:
        assert time.monotonic() < deadline, "the slot of the abandoned stream was not freed"
        time.sleep(0.1)
    assert "client gone" in turbo.log()
    r = turbo.client.post("/v1/chat/completions", json=_chat("Hello", max_tokens=4))
    assert r.status_code == 200


@pytest.mark.engine
def test_client_giving_up_on_a_plain_request_frees_the_slot(turbo):
    gone_before = turbo.log().count("client gone")
    with httpx.Client(base_url=turbo.url, timeout=1.5) as c:
        with pytest.raises(httpx.ReadTimeout):
            c.post("/api/generate", json={"model": ALIAS, "prompt": "Write a very long story about a dragon.",
                                          "stream": False, "options": {"num_predict": 900}})
    deadline = time.monotonic() + 10
    while turbo.health()["slots_idle"] != 2:
        assert time.monotonic() < deadline, "the slot of the abandoned request was not freed"
        time.sleep(0.1)
    assert turbo.log().count("client gone") == gone_before + 1


# -- context shift and keep-alive ---------------------------------------------------------

FILLER = ("Here are some facts about rivers. Rivers carry fresh water from mountains to the sea, shape valleys, "
          "feed farms and cities, and are home to fish, birds and plants of many kinds.")


def _long_conversation(turns: int = 8) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"Tell me fact number {i + 1} about rivers."})
        msgs.append({"role": "assistant", "content": FILLER})
    msgs.append({"role": "user", "content": "What is the capital of France?"})
    return msgs


@pytest.mark.engine
def test_conversation_longer_than_the_context_keeps_answering(shift):
    msgs = _long_conversation()
    r = shift.client.post("/v1/chat/completions", json={"model": ALIAS, "messages": msgs, "max_tokens": 48,
                                                         "temperature": 0})
    assert r.status_code == 200, r.text
    assert "dropped" in r.headers["x-tqgguf-context-shift"]
    body = r.json()
    text = body["choices"][0]["message"]["content"]
    assert body["usage"]["prompt_tokens"] + 48 <= 256
    printable = sum(ch.isprintable() or ch.isspace() for ch in text) / max(1, len(text))
    words = text.split()
    print(f"\ncontext shift answer (turbo4/turbo4, 256-token slot): {text!r} [{r.headers['x-tqgguf-context-shift']}]")
    assert len(words) >= 3 and printable > 0.98
    assert len(set(words)) >= len(words) / 3  # not a loop of one token
    assert "paris" in text.lower()
    # the same through Ollama's API, streaming
    s = shift.client.post("/api/chat", json={"model": ALIAS, "messages": msgs, "options": {"num_predict": 32}})
    lines = [json.loads(x) for x in s.text.splitlines() if x.strip()]
    assert s.status_code == 200 and lines[-1]["done"] is True
    assert "".join(x["message"]["content"] for x in lines).strip()


@pytest.mark.engine
def test_system_prompt_longer_than_the_context_is_a_400(shift):
    msgs = [{"role": "system", "content": FILLER * 10}, {"role": "user", "content": "hi"}]
    r = shift.client.post("/v1/chat/completions", json={"model": ALIAS, "messages": msgs})
    assert r.status_code == 400 and "context" in r.json()["error"]["message"]


@pytest.mark.engine
def test_keep_alive_unloads_the_idle_model_and_the_next_request_reloads_it(shift):
    r = shift.client.post("/api/generate", json={"model": ALIAS, "prompt": "Hi", "stream": False,
                                                 "options": {"num_predict": 2}})
    assert r.status_code == 200
    deadline = time.monotonic() + 10
    while shift.client.get("/api/ps").json()["models"]:
        assert time.monotonic() < deadline, "model still loaded 10 s after a 2 s keep-alive"
        time.sleep(0.2)
    assert shift.health()["loaded"] is False
    r = shift.client.post("/api/generate", json={"model": ALIAS, "prompt": "Hi", "stream": False,
                                                 "options": {"num_predict": 2}})
    assert r.status_code == 200 and r.json()["load_duration"] > 0
    assert "unloaded" in shift.log() and "reloaded" in shift.log()


# -- CLI: refused before loading ----------------------------------------------------------


@pytest.mark.engine
def test_port_in_use_is_a_clear_error_before_loading(model_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        t0 = time.monotonic()
        p = subprocess.run(_serve_cmd(str(model_path), "--port", str(port)), capture_output=True, text=True,
                           env=_clean_env(), timeout=60)
    assert p.returncode != 0
    assert f"port {port} is already in use" in p.stderr
    assert "loading" not in p.stderr and time.monotonic() - t0 < 30


@pytest.mark.parametrize("args,env,needle", [
    (["--ctk", "q9"], {}, "--ctk 'q9': unknown cache type; allowed: f32"),
    ([], {"TQGGUF_KV_CACHE_TYPE": "turbo5"}, "TQGGUF_KV_CACHE_TYPE='turbo5': unknown cache type"),
    ([], {"OLLAMA_KV_CACHE_TYPE": "fp8"}, "OLLAMA_KV_CACHE_TYPE='fp8'"),
    (["-fa", "off", "--ctv", "turbo4"], {}, "flash attention is off (from flag -fa='off')"),
    ([], {"OLLAMA_FLASH_ATTENTION": "0", "TQGGUF_KV_CACHE_TYPE": "q8_0"}, "OLLAMA_FLASH_ATTENTION='0'"),
    (["-np", "0"], {}, "-np '0'"),
    ([], {"TQGGUF_HOST": "localhost:70000"}, "TQGGUF_HOST='localhost:70000'"),
])
def test_bad_cli_settings_exit_2_before_loading_the_model(args, env, needle):
    p = subprocess.run(_serve_cmd("no-such-model.gguf", *args), capture_output=True, text=True,
                       env=_clean_env(**env), timeout=60)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr
    assert "loading" not in p.stderr and "no-such-model" not in p.stderr


# -- the pieces, without the engine -------------------------------------------------------


class _WordVocab:
    """A stand-in for textgen.Vocab: one token per word, a readable fake chat template."""

    bos = -1

    def tokenize(self, text, *, add_bos=None):
        return text.split()

    def detokenize(self, tokens):
        return " ".join(tokens)

    def render_chat(self, messages):
        return " ".join(f"<{m['role']}> {m['content']}" for m in messages) + " <assistant>"


def _turns(n: int) -> list[dict]:
    msgs = [{"role": "system", "content": "be brief"}]
    for i in range(n):
        msgs += [{"role": "user", "content": f"question {i} " + "w " * 8},
                 {"role": "assistant", "content": f"answer {i} " + "w " * 8}]
    return msgs + [{"role": "user", "content": "last question"}]


def test_fit_chat_keeps_system_and_newest_turns_and_never_starts_with_an_assistant_turn():
    from tqgguf.server.textgen import fit_chat

    vocab = _WordVocab()
    full = fit_chat(vocab, _turns(5), n_ctx=1000, reserve=10)
    assert full.dropped_messages == 0 and not full.shifted
    fitted = fit_chat(vocab, _turns(5), n_ctx=60, reserve=10)
    text = " ".join(fitted.tokens)
    assert len(fitted.tokens) <= 50 and fitted.dropped_messages > 0 and fitted.dropped_messages % 2 == 0
    assert text.startswith("<system> be brief <user>") and text.endswith("<user> last question <assistant>")
    assert "question 4" in text and "question 0" not in text


def test_fit_chat_cuts_the_start_of_an_overlong_last_message_and_refuses_an_overlong_system_prompt():
    from tqgguf.server.textgen import PromptTooLongError, fit_chat

    vocab = _WordVocab()
    msgs = [{"role": "system", "content": "sys"},
            {"role": "user", "content": " ".join(f"w{i}" for i in range(100))}]
    fitted = fit_chat(vocab, msgs, n_ctx=40, reserve=10)
    assert len(fitted.tokens) <= 30 and fitted.trimmed_tokens > 0
    assert fitted.tokens[-2] == "w99" and "w0" not in fitted.tokens  # the newest words stay
    with pytest.raises(PromptTooLongError, match="system messages"):
        fit_chat(vocab, [{"role": "system", "content": "s " * 50}, {"role": "user", "content": "hi"}], 40, 10)


def test_fit_tokens_drops_the_oldest_tokens_and_keeps_bos():
    from tqgguf.server.textgen import fit_tokens

    class V:
        bos = 1

    p = fit_tokens(V(), [1] + list(range(100, 200)), n_ctx=50, reserve=10)
    assert p.tokens[0] == 1 and p.tokens[-1] == 199 and len(p.tokens) == 40 and p.trimmed_tokens == 61


class _ScriptedLlama:
    """Yields a fixed token script from generate(), like llama_cpp.Llama.generate."""

    def __init__(self, script):
        self.script = script

    def set_seed(self, seed):
        pass

    def generate(self, tokens, **kw):
        yield from self.script


class _ByteVocab:
    def __init__(self, pieces: dict[int, bytes], eog: int = 0):
        self.pieces, self.eog = pieces, eog

    def is_eog(self, t):
        return t == self.eog

    def piece(self, t):
        return self.pieces[t]


def _run(script, pieces, *, stop=(), max_new=100):
    import threading as th

    from tqgguf.server.textgen import Job, Prompt, Sampling, generate

    streamed = []
    job = Job(Prompt([5], 512), Sampling(temperature=0), max_new=max_new, stop=list(stop))
    res = generate(_ScriptedLlama(script), _ByteVocab(pieces), job, th.Event(), on_text=streamed.append)
    return res, streamed


def test_token_loop_streams_whole_utf8_characters_and_stops_at_eog():
    euro = "€".encode()  # 3 bytes, split over two tokens
    res, streamed = _run([1, 2, 3, 0, 4], {1: b"price ", 2: euro[:1], 3: euro[1:], 4: b"never"})
    assert res.text == "price €" and res.finish == "stop" and res.tokens == [1, 2, 3]
    assert "".join(streamed) == res.text and all("\ufffd" not in s for s in streamed)


def test_token_loop_cuts_at_a_stop_string_even_across_tokens_and_never_streams_it():
    res, streamed = _run([1, 2, 3, 4], {1: b"Hello", 2: b" EN", 3: b"D more", 4: b"x"}, stop=["END"])
    assert res.text == "Hello " and res.finish == "stop"
    assert "".join(streamed) == "Hello " and not any("E" in s for s in streamed)


def test_token_loop_honours_max_tokens_and_cancel():
    import threading as th

    from tqgguf.server.textgen import Job, Prompt, Sampling, generate

    res, _ = _run([1] * 50, {1: b"a"}, max_new=7)
    assert res.finish == "length" and len(res.tokens) == 7 and res.text == "a" * 7
    cancel = th.Event()
    cancel.set()
    res = generate(_ScriptedLlama([1] * 50), _ByteVocab({1: b"a"}), Job(Prompt([5], 512), Sampling(), 40), cancel)
    assert res.finish == "cancelled" and res.tokens == []


def test_answer_reserve_and_clamp():
    from tqgguf.server.textgen import answer_reserve, clamp_max_new

    assert answer_reserve(1024, None) == 256 and answer_reserve(1024, 32) == 32 and answer_reserve(1024, 10**9) == 512
    assert clamp_max_new(1000, 1024, None) == 24 and clamp_max_new(100, 1024, 10**12) == 924
    assert clamp_max_new(100, 1024, 16) == 16
