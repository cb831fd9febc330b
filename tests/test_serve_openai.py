"""``tqgguf serve`` as a drop-in for Ollama and llama-server (issue 25, items 1, 4–7), with the
real clients against a real ``tqgguf serve`` and its llama-server children: tool calls on the
OpenAI route in every ``tool_choice`` form (Qwen2.5-Coder, loaded on demand), the 400 for a
template without tools (SmolLM2), Ollama's CORS with ``OLLAMA_ORIGINS`` (browser-style
preflights with httpx), llama-server's own routes through the front, OpenAI's 400s for bad
fields, and one text for one request, streamed or not, when max_tokens cuts a character.

One server for the module (SmolLM2-135M, ``-np 2 -c 512``, ``OLLAMA_ORIGINS`` set); Qwen is
loaded into it by name. Generation is kept to a few tokens: the machine is small and shared.
"""
from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import httpx
import pytest

from tests.test_server import ALIAS, QWEN, Server, _clean_env

ollama = pytest.importorskip("ollama")
openai = pytest.importorskip("openai")

NP = 2
ORIGINS = "https://app.example.com, chrome-extension://*"
TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"Current {what} of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    for name, what in (("get_weather", "weather"), ("get_time", "time"))]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
HI = [{"role": "user", "content": "Say hi"}]


@pytest.fixture(scope="module")
def srv(require_engine, model_file, tmp_path_factory):
    model_file(ALIAS)
    s = Server(ALIAS, tmp_path_factory.mktemp("serve"), "-c", "512", "-np", str(NP), "--keep-alive", "-1",
               env=_clean_env(OLLAMA_ORIGINS=ORIGINS))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def qwen(srv, model_file):
    model_file(QWEN)
    return QWEN


def _child_url(srv, name: str = ALIAS, kind: str = "chat") -> str:
    r = next(r for r in srv.health()[1]["runners"] if r["name"] == name and r["kind"] == kind)
    return f"http://127.0.0.1:{r['port']}"


def _stream_calls(chunks) -> tuple[dict[int, dict], list[str], str]:
    """Tool-call deltas of a streamed answer put together per index, the finish reasons, the text."""
    calls: dict[int, dict] = {}
    for c in chunks:
        for d in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            slot = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
            slot["id"] = slot["id"] or d.id
            slot["name"] += d.function.name or ""
            slot["arguments"] += d.function.arguments or ""
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return calls, finish, text


# -- 1. tools on the OpenAI route --------------------------------------------------------------


def test_tool_calls_on_the_openai_route_in_every_tool_choice_form(srv, qwen):
    kw = dict(model=qwen, messages=ASK, tools=TOOLS, temperature=0, max_tokens=40)
    auto = srv.oa.chat.completions.create(**kw)
    ch = auto.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content is None
    (call,) = ch.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    assert json.loads(call.function.arguments)["city"].lower() == "paris"
    # llama-server itself returns that answer as text (the model writes the call as plain JSON)
    raw = httpx.post(_child_url(srv, qwen) + "/v1/chat/completions", json=kw | {"model": qwen}, timeout=600).json()
    assert raw["choices"][0]["message"].get("tool_calls") is None and "get_weather" in raw["choices"][0]["message"]["content"]

    # a named function (an object llama-server does not read): that function is called, streamed as deltas
    named = list(srv.oa.chat.completions.create(**kw, stream=True, tool_choice={
        "type": "function", "function": {"name": "get_time"}}))
    calls, finish, text = _stream_calls(named)
    assert [c["name"] for c in calls.values()] == ["get_time"] and finish == ["tool_calls"] and text == ""
    assert json.loads(calls[0]["arguments"])["city"].lower() == "paris" and calls[0]["id"]

    none = srv.oa.chat.completions.create(**kw | {"max_tokens": 8}, tool_choice="none")
    assert not none.choices[0].message.tool_calls and none.choices[0].finish_reason != "tool_calls"
    with pytest.raises(openai.BadRequestError) as e:
        srv.oa.chat.completions.create(**kw, tool_choice={"type": "function", "function": {"name": "get_stock"}})
    assert "get_stock" in str(e.value) and "get_weather, get_time" in str(e.value)


def test_tool_choice_required_streamed_and_the_result_answered(srv, qwen):
    kw = dict(model=qwen, tools=TOOLS[:1], temperature=0, max_tokens=40)
    calls, finish, _ = _stream_calls(list(srv.oa.chat.completions.create(messages=ASK, tool_choice="required",
                                                                         stream=True, **kw)))
    assert [c["name"] for c in calls.values()] == ["get_weather"] and finish == ["tool_calls"]
    # the call and its result sent back: the model answers from the result
    msgs = ASK + [{"role": "assistant", "content": "", "tool_calls": [{"id": calls[0]["id"], "type": "function",
                   "function": {"name": "get_weather", "arguments": calls[0]["arguments"]}}]},
                  {"role": "tool", "tool_call_id": calls[0]["id"], "content": "The weather in Paris is 18 degrees C and sunny."},
                  {"role": "user", "content": "So, what is the weather?"}]
    # (asked without the tools: offered them again, a 0.5B model calls them again)
    final = srv.oa.chat.completions.create(model=qwen, messages=msgs, temperature=0, max_tokens=40)
    assert "18" in final.choices[0].message.content


def test_tools_for_a_template_without_them_are_refused_on_both_apis(srv):
    for choice in ("auto", "required", None):
        with pytest.raises(openai.BadRequestError) as e:
            srv.oa.chat.completions.create(model=ALIAS, messages=HI, tools=TOOLS, max_tokens=4,
                                           **({"tool_choice": choice} if choice else {}))
        assert f"{ALIAS} does not support tools" in e.value.message and e.value.body["param"] == "tools"
    ok = srv.oa.chat.completions.create(model=ALIAS, messages=HI, tools=TOOLS, tool_choice="none", max_tokens=4)
    assert ok.choices[0].message.content
    with pytest.raises(ollama.ResponseError) as oe:
        srv.ol.chat(model=ALIAS, messages=HI, tools=TOOLS, options={"num_predict": 4})
    assert oe.value.status_code == 400 and "does not support tools" in oe.value.error
    assert "tools" not in srv.ol.show(ALIAS).capabilities


# -- 4. CORS -----------------------------------------------------------------------------------


def _preflight(srv, path: str, origin: str) -> httpx.Response:
    return srv.http.options(path, headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                           "Access-Control-Request-Headers": "content-type,x-stainless-lang"})


@pytest.mark.parametrize("origin", ["http://localhost:5173", "http://127.0.0.1", "https://0.0.0.0:8443",
                                    "vscode-webview://1a2b3c", "tauri://localhost", "https://app.example.com",
                                    "chrome-extension://abcdefgh"])
def test_cors_preflight_and_requests_from_allowed_origins_on_both_apis(srv, origin):
    for path in ("/api/chat", "/v1/chat/completions"):
        r = _preflight(srv, path, origin)
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-origin"] == origin
        assert "POST" in r.headers["access-control-allow-methods"]
        assert "x-stainless-lang" in r.headers["access-control-allow-headers"].lower()
    for path in ("/api/tags", "/v1/models"):
        g = srv.http.get(path, headers={"Origin": origin})
        assert g.status_code == 200 and g.headers["access-control-allow-origin"] == origin


def test_cors_refuses_other_origins_with_403_as_ollama_and_leaves_same_origin_and_plain_requests(srv):
    for path in ("/api/chat", "/v1/chat/completions"):
        assert _preflight(srv, path, "https://evil.example").status_code == 403
        # a "simple" cross-site POST (text/plain) is refused before it runs, not only hidden from the page
        r = srv.http.post(path, content=json.dumps({"model": ALIAS, "messages": HI, "max_tokens": 2}),
                          headers={"Origin": "https://evil.example", "Content-Type": "text/plain"})
        assert r.status_code == 403 and "OLLAMA_ORIGINS" in r.text and "access-control-allow-origin" not in r.headers
    assert _preflight(srv, "/api/chat", "http://localhost.evil.example").status_code == 403
    same = srv.http.get("/api/version", headers={"Origin": srv.url})
    assert same.status_code == 200
    assert srv.http.get("/api/version").status_code == 200  # no Origin: not a browser request
    assert srv.http.options("/api/chat").status_code == 405  # OPTIONS without CORS headers: no preflight


def test_cors_preflight_asking_for_a_header_ollama_does_not_allow_gets_its_403(srv):
    r = srv.http.options("/api/chat", headers={"Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST",
                                               "Access-Control-Request-Headers": "content-type,x-secret-token"})
    assert r.status_code == 403 and "headers" in r.text.lower()
    assert _preflight(srv, "/api/chat", "http://localhost:5173").status_code == 200  # the allowed ones still pass


def test_llama_servers_all_origins_warning_is_gone_and_its_child_sets_no_cors(srv):
    assert "CORS allows all origins" not in srv.log()
    pid = srv.health()[1]["runners"][0]["pid"]
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert b"LLAMA_ARG_CORS_ORIGINS=localhost" in env
    r = httpx.get(_child_url(srv) + "/health", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in r.headers


def test_origins_setting_is_parsed_as_ollama_and_shown_by_env():
    from tqgguf.values import parse_origins
    from tqgguf.server.cors import DEFAULT_ORIGINS, origin_pattern

    assert parse_origins(" https://a.b ,'chrome-extension://*'") == ("https://a.b", "chrome-extension://*")
    for bad, needle in (("a.b", "not an origin"), ("http://*.a:*", "more than one")):
        with pytest.raises(ValueError, match=needle):
            parse_origins(bad)
    rx = re.compile(origin_pattern(("https://*.example.com",) + DEFAULT_ORIGINS))
    assert rx.fullmatch("https://x.example.com") and rx.fullmatch("HTTP://LOCALHOST:3000")
    assert not rx.fullmatch("https://example.org") and not rx.fullmatch("http://localhost.evil.org")
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "tqgguf", "env"], capture_output=True, text=True,
                         env=_clean_env(OLLAMA_ORIGINS="https://app.example.com")).stdout
    assert "origins = https://app.example.com" in out and "OLLAMA_ORIGINS = 'https://app.example.com'" in out
    bad = subprocess.run([sys.executable, "-m", "tqgguf", "env"], capture_output=True, text=True,
                         env=_clean_env(OLLAMA_ORIGINS="nope"))
    assert bad.returncode != 0 and "OLLAMA_ORIGINS='nope'" in bad.stdout + bad.stderr


# -- 5. llama-server's routes ------------------------------------------------------------------


def test_llama_server_routes_through_the_front(srv):
    toks = srv.http.post("/tokenize", json={"content": "Hello world"}).json()["tokens"]
    assert len(toks) >= 2
    assert srv.http.post("/detokenize", json={"tokens": toks}).json()["content"].strip() == "Hello world"
    prompt = srv.http.post("/apply-template", json={"messages": HI}).json()["prompt"]
    assert "Say hi" in prompt and "<|im_start|>" in prompt
    props = srv.http.get("/props").json()
    assert props["model_alias"] == ALIAS and props["total_slots"] == NP
    slots = srv.http.get("/slots").json()
    assert [s["n_ctx"] for s in slots] == [512] * NP
    done = srv.http.post("/completion", json={"prompt": "The capital of France is", "n_predict": 3,
                                              "temperature": 0}).json()
    assert done["tokens_predicted"] == 3 and done["content"]
    with srv.http.stream("POST", "/completion", json={"prompt": "The capital of France is", "n_predict": 3,
                                                      "temperature": 0, "stream": True}) as r:
        events = [json.loads(ln[5:]) for ln in r.iter_lines() if ln.startswith("data: {")]
    assert "".join(e["content"] for e in events) == done["content"] and events[-1]["stop"] is True
    emb = srv.http.post("/embedding", json={"content": "the cat sat"}).json()
    assert len(emb[0]["embedding"][0]) == 576  # SmolLM2-135M's n_embd, from its embeddings child
    rr = srv.http.post("/v1/rerank", json={"query": "cat", "documents": ["a cat", "a car"]})
    assert rr.status_code == 400 and "not a reranking model" in rr.json()["error"]["message"]


INFILL = {"input_prefix": "def add(a, b):\n    return ", "input_suffix": "\n\n\nprint(add(2, 3))\n",
          "n_predict": 6, "temperature": 0}


def test_infill_through_the_front_fills_the_middle_with_a_fim_model(srv, qwen):
    done = srv.http.post("/infill", json={"model": qwen, **INFILL})
    assert done.status_code == 200, done.text
    done = done.json()
    # Qwen2.5-Coder's FIM tokens around the prefix and suffix: the middle is the sum
    assert "a + b" in done["content"] and 0 < done["tokens_predicted"] <= INFILL["n_predict"], done
    with srv.http.stream("POST", "/infill", json={"model": qwen, **INFILL, "stream": True}) as r:
        assert r.status_code == 200
        events = [json.loads(ln[5:]) for ln in r.iter_lines() if ln.startswith("data: {")]
    assert "".join(e["content"] for e in events) == done["content"] and events[-1]["stop"] is True
    # bodies llama-server answers with a 500 (or a 200 that ignores the field) are 400s naming the field
    for bad, param, needle in [({"input_suffix": "x"}, "input_prefix", "input_prefix is required"),
                               ({"input_prefix": 1, "input_suffix": "x"}, "input_prefix", "must be a string"),
                               ({"input_prefix": "a", "input_suffix": "x", "prompt": 5}, "prompt", "must be a string")]:
        e = srv.http.post("/infill", json={"model": qwen, **bad}).json()["error"]
        assert (e["code"], e["param"]) == (400, param) and needle in e["message"], e
    # a model without FIM tokens (SmolLM2): a 400 (llama-server: 501) naming what is missing and what works
    e = srv.http.post("/infill", json=INFILL)
    msg = e.json()["error"]["message"]
    assert e.status_code == 400 and "no fill-in-the-middle tokens" in msg and "prefix token is missing" in msg, msg


FIM = {"prompt": INFILL["input_prefix"], "suffix": INFILL["input_suffix"]}


def test_a_suffix_fills_the_middle_on_v1_completions_and_api_generate(srv, qwen):
    """OpenAI's and Ollama's ``suffix`` run through llama-server's /infill (Qwen2.5-Coder's FIM
    tokens around prompt and suffix): the middle is the sum, streamed or not, on both APIs."""
    done = srv.oa.completions.create(model=qwen, **FIM, max_tokens=6, temperature=0)
    ch = done.choices[0]
    assert done.object == "text_completion" and "a + b" in ch.text and ch.finish_reason in ("stop", "length")
    assert 0 < done.usage.completion_tokens <= 6 and done.usage.prompt_tokens > 10
    chunks = list(srv.oa.completions.create(model=qwen, **FIM, max_tokens=6, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == ch.text and chunks[-1].choices[0].finish_reason == ch.finish_reason
    opts = {"temperature": 0, "num_predict": 6}
    g = srv.ol.generate(model=qwen, **FIM, options=opts)
    assert "a + b" in g.response and g.done and not g.context  # no context: the prompt went through FIM tokens
    assert "".join(p.response for p in srv.ol.generate(model=qwen, **FIM, options=opts, stream=True)) == g.response
    # a model without FIM tokens: a 400 on both, naming why (llama-server answers 501)
    with pytest.raises(openai.BadRequestError) as e:
        srv.oa.completions.create(model=ALIAS, **FIM, max_tokens=2)
    assert "no fill-in-the-middle tokens" in e.value.message
    with pytest.raises(ollama.ResponseError) as e:
        srv.ol.generate(model=ALIAS, **FIM, options=opts)
    assert e.value.status_code == 400 and "no fill-in-the-middle tokens" in str(e.value)


@pytest.mark.parametrize("body,param,needle", [
    ({"prompt": "x", "echo": True}, "echo", "prepend the prompt yourself"),
    ({"prompt": ["a", "b"], "suffix": "c"}, "prompt", "must be one string"),
    ({"prompt": "a", "suffix": "c", "n": 2}, "n", "not supported with 'suffix'"),
    ({"prompt": "a", "suffix": "c", "logprobs": 2}, "logprobs", "not supported with 'suffix'"),
    ({"prompt": "a", "suffix": 5}, "suffix", "valid string"),
])
def test_completions_echo_and_suffix_limits_are_400s_not_silently_dropped(srv, body, param, needle):
    r = srv.http.post("/v1/completions", json={"model": ALIAS, "max_tokens": 2, **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and needle in err["message"], err


def test_responses_and_anthropic_messages_through_the_front(srv):
    r = srv.oa.responses.create(model=ALIAS, input="Say hi", max_output_tokens=5, temperature=0)
    assert r.output_text and r.usage.output_tokens <= 5
    events = list(srv.oa.responses.create(model=ALIAS, input="Say hi", max_output_tokens=5, temperature=0,
                                          stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.output_text == r.output_text
    m = srv.http.post("/v1/messages", json={"model": ALIAS, "max_tokens": 5, "messages": HI}).json()
    assert m["type"] == "message" and m["content"][0]["text"] and m["usage"]["output_tokens"] <= 5
    n = srv.http.post("/v1/messages/count_tokens", json={"model": ALIAS, "messages": HI}).json()
    assert n["input_tokens"] > 3


PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
RESPONSE_TOOLS = [{"type": "function", "name": t["function"]["name"], "description": t["function"]["description"],
                   "parameters": t["function"]["parameters"]} for t in TOOLS]


def test_responses_text_format_json_schema_constrains_the_output(srv):
    """``text.format`` (which llama-server's Responses conversion ignores) becomes chat's
    response_format: the answer is JSON of the schema, streamed too."""
    fmt = {"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}}
    r = srv.oa.responses.create(model=ALIAS, input="Give a person's name and age", text=fmt, max_output_tokens=40,
                                temperature=0)
    person = json.loads(r.output_text)
    assert set(person) == {"name", "age"} and isinstance(person["age"], int), r.output_text
    events = list(srv.oa.responses.create(model=ALIAS, input="Give a person's name and age", text=fmt,
                                          max_output_tokens=40, temperature=0, stream=True))
    assert events[-1].response.output_text == r.output_text
    j = srv.oa.responses.create(model=ALIAS, input="Say hi as JSON", text={"format": {"type": "json_object"}},
                                max_output_tokens=20, temperature=0)
    assert j.output_text.lstrip().startswith("{")


def test_responses_tools_give_function_call_items_for_a_plain_json_call(srv, qwen):
    """Qwen2.5-Coder's plain-JSON call comes back as a ``function_call`` output item (as on the
    chat route), for tool_choice auto and the Responses object form, which names the tool flat."""
    for choice in ("auto", {"type": "function", "name": "get_weather"}):
        r = srv.oa.responses.create(model=qwen, input="What is the weather in Paris?", tools=RESPONSE_TOOLS,
                                    tool_choice=choice, temperature=0, max_output_tokens=40)
        (call,) = r.output
        assert call.type == "function_call" and call.name == "get_weather" and call.call_id, r.output
        assert json.loads(call.arguments)["city"].lower() == "paris"
    with pytest.raises(openai.BadRequestError) as e:  # a template without tools, as on the chat route
        srv.oa.responses.create(model=ALIAS, input="hi", tools=RESPONSE_TOOLS, max_output_tokens=2)
    assert "does not support tools" in e.value.message


@pytest.mark.parametrize("body,param,needle", [
    ({"max_output_tokens": -5}, "max_output_tokens", "allowed: 1 to 2147483647"),
    ({"temperature": 3}, "temperature", "allowed: 0 to 2"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type", "'json_schema'"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format", "needs its 'schema'"),
    ({"tools": [{"type": "function"}]}, "tools[0]", "needs its 'name'"),
    ({"tool_choice": {"type": "function", "function": {"name": "x"}}}, "tool_choice", '"name": ...'),
])
def test_responses_bad_fields_are_400s_naming_the_field(srv, body, param, needle):
    r = srv.http.post("/v1/responses", json={"model": ALIAS, "input": "hi", **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and needle in err["message"], err


@pytest.mark.parametrize("path,body", [("/v1/chat/completions", {"messages": HI}), ("/v1/completions", {"prompt": "x"}),
                                       ("/v1/embeddings", {"input": "x"}), ("/v1/responses", {"input": "x"})])
def test_the_openai_routes_need_a_model_as_openai_does(srv, path, body):
    r = srv.http.post(path, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["message"] == "you must provide a model parameter" and err["param"] == "model", err


def test_v1_models_lists_every_servable_model_and_n_is_bounded_by_the_slots(srv, model_file):
    model_file("gemma3-270m")
    listed = {m.id for m in srv.oa.models.list().data}
    tags = {m.model.removesuffix(":latest") for m in srv.ol.list().models}
    assert "gemma3-270m" in listed and listed == tags
    loaded = {r["name"] for r in srv.health()[1]["runners"]}
    assert "gemma3-270m" not in loaded  # listed without being loaded
    two = srv.oa.chat.completions.create(model=ALIAS, messages=HI, n=NP, max_tokens=2)
    assert len(two.choices) == NP
    with pytest.raises(openai.BadRequestError) as e:
        srv.oa.chat.completions.create(model=ALIAS, messages=HI, n=NP + 1, max_tokens=2)
    assert "-np" in e.value.message and "OLLAMA_NUM_PARALLEL" in e.value.message and f"1 to {NP}" in e.value.message


# -- 6. 400s with OpenAI's error shape ---------------------------------------------------------


PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000" "1f15c4890000000d49444154789c6360f8cfc0f01f0005"
    "0001ff5a0d2f740000000049454e44ae426082")).decode()


@pytest.mark.parametrize("path,body,param,needle", [
    ("/v1/embeddings", {"input": 123}, "input", "must be a non-empty string"),
    ("/v1/embeddings", {"input": ["a", 1]}, "input", "token ids"),
    ("/v1/chat/completions", {"messages": HI, "tools": "nope"}, "tools", "valid list"),
    ("/v1/chat/completions", {"messages": []}, "messages", "empty array"),
    ("/v1/chat/completions", {"messages": HI, "max_tokens": 0}, "max_tokens", "allowed: 1 to 2147483647"),
    ("/v1/chat/completions", {"messages": HI, "max_tokens": 2 ** 31}, "max_tokens", "2147483648 is out of range"),
    ("/v1/chat/completions", {"messages": HI, "temperature": -1}, "temperature", "allowed: 0 to 2"),
    ("/v1/chat/completions", {"messages": HI, "top_p": 5}, "top_p", "allowed: 0 to 1"),
    ("/v1/chat/completions", {"messages": HI, "temperature": "hot"}, "temperature", "valid number"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "'user'"),
    ("/v1/chat/completions", {"messages": HI, "tool_choice": "always"}, "tool_choice", '"required"'),
    ("/v1/completions", {"prompt": {"a": 1}}, "prompt", "list of token ids"),
    ("/v1/completions", {"prompt": "x", "top_p": -0.5}, "top_p", "allowed: 0 to 1"),
])
def test_bad_fields_are_400s_in_openais_shape(srv, path, body, param, needle):
    r = srv.http.post(path, json={"model": ALIAS, **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and needle in err["message"], err


def test_llama_servers_500s_for_bad_requests_are_400s_that_say_what_to_change(srv):
    long_text = "the cat sat on the mat " * 200  # ~1200 tokens, over the 512 of the embeddings batch
    with pytest.raises(openai.BadRequestError) as e:
        srv.oa.embeddings.create(model=ALIAS, input=long_text)
    assert "512 tokens an embeddings batch" in e.value.message and "-c" in e.value.message
    # llama-server itself answers that request with a 500
    raw = httpx.post(_child_url(srv, kind="embed") + "/v1/embeddings", json={"input": long_text}, timeout=120)
    assert raw.status_code == 500
    image = [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                          {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]}]
    with pytest.raises(openai.BadRequestError) as e:
        srv.oa.chat.completions.create(model=ALIAS, messages=image, max_tokens=4)
    assert "--mmproj" in e.value.message and "image" in e.value.message
    assert srv.health()[0] == 200


# -- 7. UTF-8: one text, streamed or not -------------------------------------------------------


def test_a_character_cut_by_max_tokens_is_dropped_streamed_and_not(srv):
    """SmolLM2 writes Japanese as 2–3 tokens per character: at max_tokens 1 and 3 the last token
    ends inside a character. llama-server's non-streamed answer ends in U+FFFD there, its
    stream drops the bytes; through the front both drop them, on both APIs."""
    msgs = [{"role": "user", "content": "Translate to Japanese: I love my cat."}]
    raw = httpx.post(_child_url(srv) + "/v1/chat/completions", timeout=120,
                     json={"messages": msgs, "max_tokens": 1, "temperature": 0}).json()
    assert raw["choices"][0]["message"]["content"].endswith("\ufffd")  # the cut the front has to handle
    texts = {}
    for k in (1, 3):
        kw = dict(model=ALIAS, messages=msgs, max_tokens=k, temperature=0)
        whole = srv.oa.chat.completions.create(**kw).choices[0].message.content
        streamed = "".join(c.choices[0].delta.content or "" for c in srv.oa.chat.completions.create(**kw, stream=True)
                           if c.choices)
        assert whole == streamed and "\ufffd" not in whole, (k, whole, streamed)
        texts[k] = whole
        opts = {"num_predict": k, "temperature": 0}
        o = srv.ol.chat(model=ALIAS, messages=msgs, options=opts).message.content
        o_streamed = "".join(p.message.content for p in srv.ol.chat(model=ALIAS, messages=msgs, options=opts,
                                                                     stream=True))
        assert o == o_streamed and "\ufffd" not in o
    assert texts[1] == "" and texts[3] and texts[3][-1] > "\u3000"  # k=3 ends in a whole Japanese character


def test_chat_answer_holds_back_only_what_may_be_a_call_and_ends_a_demanded_one_early():
    """The stream rewrite on its own, on llama-server's SSE lines (no server)."""
    from tqgguf.server.openai_api import ChatAnswer

    def line(content=None, finish=None):
        delta = {} if content is None else {"content": content}
        return ("data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n").encode()

    def events(out: bytes) -> list:
        return [json.loads(x[6:]) for x in out.decode().splitlines() if x.startswith("data: {")]

    call = ['```json\n{"name": "get_weather", ', '"arguments": {"city": "Paris"}}\n', '```']
    a = ChatAnswer({"get_weather"})
    outs = [events(a.sse_line(line(p))) for p in call] + [events(a.sse_line(line(finish="stop")))]
    assert all(not ev["choices"][0]["delta"].get("content") for o in outs for ev in o)  # nothing leaked as text
    last = outs[-1]
    (tc,) = last[0]["choices"][0]["delta"]["tool_calls"]
    assert tc["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'} and tc["index"] == 0
    assert last[-1]["choices"][0]["finish_reason"] == "tool_calls" and not a.finished

    prose = ChatAnswer({"get_weather"})
    assert events(prose.sse_line(line("It is")))[0]["choices"][0]["delta"]["content"] == "It is"
    assert events(prose.sse_line(line(" {sunny}")))[0]["choices"][0]["delta"]["content"] == " {sunny}"

    demanded = ChatAnswer({"get_weather"}, demanded=True)
    demanded.sse_line(line('{"name": "get_weather", "arguments": '))
    assert not demanded.finished
    out = demanded.sse_line(line('{"city": "Paris"}}.json\n'))
    assert demanded.finished and out.endswith(b"data: [DONE]\n")
    assert events(out)[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # a whole answer: the U+FFFD of a cut character goes, a plain-JSON call becomes tool_calls
    whole = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "".join(call)}},
                         {"index": 1, "finish_reason": "length", "message": {"role": "assistant", "content": "これ\ufffd"}}]}
    j = json.loads(ChatAnswer({"get_weather"}).body(json.dumps(whole).encode()))
    assert j["choices"][0]["finish_reason"] == "tool_calls" and j["choices"][0]["message"]["content"] is None
    assert j["choices"][1]["message"]["content"] == "これ"
    untouched = json.dumps({"choices": [{"message": {"content": "plain"}, "finish_reason": "stop"}]}).encode()
    assert ChatAnswer().body(untouched) is untouched
