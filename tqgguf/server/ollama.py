"""Ollama's API on top of llama-server: request fields in, llama-server fields out, and back.

Field names, defaults and response shapes follow Ollama's docs/api.md: ``options`` (the
Modelfile parameters), ``format`` ("json" or a JSON schema), ``tools``, ``think``,
``raw``, ``context``, ``keep_alive``, ``logprobs``/``top_logprobs``; responses carry
``created_at``, ``done``, ``done_reason`` and the timings in nanoseconds
(``total_duration``, ``load_duration``, ``prompt_eval_count``, ``prompt_eval_duration``,
``eval_count``, ``eval_duration``); errors are ``{"error": "message"}``.

Pure functions only (no I/O): ``app`` does the HTTP calls.
"""
from __future__ import annotations

import datetime as dt
import json
from typing import Any

from ..config import MIN_CONTEXT
from ..values import parse_duration
from .load_options import LOAD_OPTIONS

#: The Ollama API level these routes follow (logprobs on /api/chat and /api/generate came in 0.12.11).
OLLAMA_API_VERSION = "0.12.11"

#: Ollama's default sampling (api.DefaultOptions in Ollama's api/types.go), sent to
#: llama-server so /api/* answers as Ollama's do (llama-server's own defaults differ).
OLLAMA_DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "min_p": 0.0, "typical_p": 1.0,
                   "repeat_penalty": 1.1, "repeat_last_n": 64, "presence_penalty": 0.0, "frequency_penalty": 0.0,
                   # num_keep 4 ("a minimal num_keep to avoid issues on context shifts"): the prompt tokens a
                   # context shift and a truncated /api/generate prompt keep at the start
                   "n_keep": 4}

#: Ollama bounds an open-ended generation (num_predict -1, the default) to this many times the
#: context (``openEndedGenerationContextMultiplier`` in Ollama's llm/llama_server.go): with the
#: context shift on, a model that never stops would otherwise run forever.
OPEN_ENDED_CONTEXTS = 10

#: Ollama option -> llama-server request field (same meaning).
OPTION_FIELDS = {
    "temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "typical_p": "typical_p",
    "repeat_penalty": "repeat_penalty", "repeat_last_n": "repeat_last_n", "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty", "seed": "seed", "num_predict": "n_predict", "stop": "stop",
    "num_keep": "n_keep", "mirostat": "mirostat", "mirostat_tau": "mirostat_tau", "mirostat_eta": "mirostat_eta",
    "penalize_newline": None, "tfs_z": None,
}

#: The options Ollama declares as Go ints (``api.Options``/``Runner``), with the range llama-server
#: takes them in (its fields are 32-bit; a seed is unsigned, -1 random): a value outside is a 400,
#: as Ollama refuses a number that does not fit its field, not a wrapped number.
INT_OPTIONS = {k: (-(1 << 31), (1 << 31) - 1) for k in ("num_predict", "top_k", "repeat_last_n", "num_keep",
                                                        "mirostat")}
INT_OPTIONS["seed"] = (-(1 << 31), (1 << 32) - 1)
class RequestError(Exception):
    """A request the API refuses: HTTP ``status`` and the message for the client."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def now_rfc3339() -> str:
    """The current UTC time as Ollama writes ``created_at`` (RFC 3339, nanosecond-free)."""
    return dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")


def require_object(body: Any) -> dict:
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    return body


def model_name(body: dict) -> str:
    name = body.get("model") or body.get("name")
    if not isinstance(name, str) or not name.strip():
        raise RequestError(400, "model is required")
    return name


def flag(body: dict, key: str, default: bool) -> bool:
    """A boolean request field (``stream``, ``raw``, ``truncate``, ``shift``): ``default`` when
    absent or null; RequestError(400) for any other type, as Ollama's JSON decoding refuses
    ``"stream": "false"`` (a string would otherwise count as true and stream)."""
    v = body.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise RequestError(400, f"json: cannot unmarshal {_json_kind(v)} into Go value of type bool: {key} must be "
                                f"true or false (default {str(default).lower()}), not {json.dumps(v)}")
    return v


def _json_kind(v: Any) -> str:
    """Go's name for a JSON value's kind in its unmarshal errors."""
    return ("string" if isinstance(v, str) else "number" if isinstance(v, (int, float)) else
            "array" if isinstance(v, list) else "object" if isinstance(v, dict) else "value")


def keep_alive(body: dict) -> float | None:
    """The request's ``keep_alive`` in seconds (None: not given). Ollama accepts a duration
    string ("5m") or a number of seconds; negative keeps the model loaded."""
    v = body.get("keep_alive")
    if v is None:
        return None
    if isinstance(v, bool):
        raise RequestError(400, f"keep_alive {v!r} is not a duration; allowed: 5m, 1h, 30s, 0, -1, or seconds")
    try:
        return parse_duration(v)
    except ValueError as e:
        raise RequestError(400, f"keep_alive {v!r}: {e}") from None


def model_defaults(params: dict[str, Any]) -> dict[str, Any]:
    """The options a model's Modelfile parameters (Ollama's params layer) give every request:
    the sampling ones :data:`OPTION_FIELDS` maps and ``num_ctx``; the other load-time ones
    (num_gpu, num_thread...) are the server's to choose here and are not applied, nor are
    names llama.cpp has no sampler for."""
    return {k: v for k, v in params.items() if (OPTION_FIELDS.get(k) or k == "num_ctx") and v is not None}


#: Ollama option -> the fields of an OpenAI request (``/v1/chat/completions``, ``/v1/completions``) that set
#: the same thing besides llama-server's own name (:data:`OPTION_FIELDS`): a request that sends any of them
#: keeps its value.
OPENAI_ALIASES = {"num_predict": ("max_tokens", "max_completion_tokens")}


def openai_defaults(body: dict, params: dict[str, Any]) -> dict | None:
    """An OpenAI request's body with a model's Modelfile parameters (:func:`model_defaults`,
    ``num_ctx`` aside: the runner's context) as defaults for the fields it leaves out, as
    Ollama applies them on its OpenAI-compatible endpoints (their requests become
    ``api.ChatRequest``/``api.GenerateRequest`` with the model's options under them): e.g.
    ``PARAMETER temperature 0.2`` gives ``temperature: 0.2`` unless the request sends one,
    ``num_predict 64`` gives ``n_predict: 64`` unless it sends ``max_tokens``. None when there
    is nothing to add."""
    add = {}
    for k, v in model_defaults(params).items():
        field = OPTION_FIELDS.get(k)
        if field is None or any(n in body for n in (field, *OPENAI_ALIASES.get(k, ()))):
            continue
        add[field] = [v] if k == "stop" and isinstance(v, str) else v
    return {**body, **add} if add else None


def options(body: dict, defaults: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """llama-server sampling fields for the request's ``options`` (Ollama defaults first, then
    ``defaults``, the model's own parameters: :func:`model_defaults`; as Ollama layers them),
    and its load-time options (``load_options.LOAD_OPTIONS``: num_ctx, num_batch, num_thread,
    num_gpu, use_mmap, ...) with their values type-checked; the runner compares those with
    what the model runs with (``Manager.plan_load``). Raises RequestError for an unknown
    option or a value of the wrong type or range."""
    opts = body.get("options") or {}
    if not isinstance(opts, dict):
        raise RequestError(400, "options must be an object of Modelfile parameters, e.g. {\"temperature\": 0}")
    opts = {**(defaults or {}), **opts}
    out: dict[str, Any] = dict(OLLAMA_DEFAULTS)
    load: dict[str, Any] = {}
    for k, v in opts.items():
        if k in LOAD_OPTIONS:
            if v is not None:  # Ollama skips a null option
                load[k] = _load_value(k, v)
            continue
        if k not in OPTION_FIELDS:
            raise RequestError(400, f"unknown option {k!r}; allowed: {', '.join(sorted([*OPTION_FIELDS, *LOAD_OPTIONS]))}")
        field = OPTION_FIELDS[k]
        if field is None:
            raise RequestError(400, f"options.{k} is not supported by llama.cpp's sampler (removed upstream)")
        if k == "stop":
            if isinstance(v, str):
                v = [v]
            if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
                raise RequestError(400, "options.stop must be a string or a list of strings")
        elif isinstance(v, bool) or not isinstance(v, (int, float)):
            raise RequestError(400, f"options.{k} {v!r} must be a number")
        elif k in INT_OPTIONS:
            v = _int_option(k, v)
        out[field] = v
    return out, load


def _int_option(k: str, v: int | float) -> int:
    """An integer option's value (a whole float counts, as JSON numbers do); RequestError(400)
    for a fraction or a value outside :data:`INT_OPTIONS` (``num_predict: 1e20``)."""
    lo, hi = INT_OPTIONS[k]
    if isinstance(v, float) and not v.is_integer() or not lo <= v <= hi:
        raise RequestError(400, f"json: cannot unmarshal number {json.dumps(v)} into Go struct field "
                                f"Options.{k} of type int (options.{k} must be an integer from {lo} to {hi})")
    return int(v)


#: Smallest value of each integer load-time option (num_gpu -1: the server's choice; num_thread 0: the same).
_LOAD_MIN = {"num_ctx": MIN_CONTEXT, "num_batch": 1, "num_thread": 0, "num_gpu": -1, "main_gpu": 0, "num_gqa": 1}


def _load_value(k: str, v: Any) -> Any:
    """A load-time option's value checked as Ollama parses it (``Options.FromMap``: a JSON
    number for an integer option, whole-valued; true/false for a boolean one)."""
    if LOAD_OPTIONS[k][1] is bool:
        if not isinstance(v, bool):
            raise RequestError(400, f"options.{k} {json.dumps(v)} must be true or false")
        return v
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < _LOAD_MIN[k]:
        what = (f"an integer of at least {MIN_CONTEXT} (tokens per slot)" if k == "num_ctx" else
                f"an integer of at least {_LOAD_MIN[k]}")
        raise RequestError(400, f"options.{k} {json.dumps(v)} must be {what}")
    return v


def bound_predict(sampling: dict[str, Any], n_ctx: int) -> None:
    """Ollama's bound on an open-ended generation: ``n_predict`` unset or negative becomes
    :data:`OPEN_ENDED_CONTEXTS` x ``n_ctx`` (in place)."""
    n = sampling.get("n_predict")
    if n is None or n < 0 or n > OPEN_ENDED_CONTEXTS * n_ctx:
        sampling["n_predict"] = OPEN_ENDED_CONTEXTS * n_ctx


def truncate_tokens(tokens: list[int], n_ctx: int, n_keep: int, adds_bos: bool) -> tuple[list[int], int]:
    """A prompt of ``tokens`` cut to fit ``n_ctx`` as Ollama cuts an /api/generate prompt
    (``completionPromptForRequest`` in Ollama's llm/llama_server.go): unchanged when it has at
    most ``n_ctx - 1`` tokens; else the first ``n_keep`` tokens (all for a negative value; one
    more for the BOS the tokenizer adds; at most ``n_ctx - 1``) and the latest ones, to a length
    of ``n_ctx - max((n_ctx - n_keep) // 2, 1)``: the middle goes, and about half the context
    stays free for the answer (the old runners' first context shift). Returns (the tokens,
    how many leading ones were kept)."""
    if len(tokens) <= n_ctx - 1:
        return list(tokens), len(tokens)
    keep = len(tokens) if n_keep < 0 else n_keep
    keep = min(keep + (1 if adds_bos else 0), n_ctx - 1)
    limit = n_ctx - max((n_ctx - keep) // 2, 1)
    return list(tokens[:keep]) + list(tokens[len(tokens) - (limit - keep):]), keep


def format_schema(fmt: Any) -> dict | None:
    """The JSON schema for Ollama's ``format``: "json" -> any JSON object; a schema
    object -> itself; absent/"" -> None. RequestError otherwise."""
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return {"type": "object"}
    if isinstance(fmt, dict):
        return fmt
    raise RequestError(400, f"format {fmt!r} is not valid; allowed: \"json\" or a JSON schema object")


def supports_thinking(chat_template: str) -> bool:
    """True when the model's chat template has a thinking switch or thinking tags."""
    return any(m in chat_template for m in ("enable_thinking", "<think>", "reasoning_content", "thinking"))


def supports_tools(chat_template: str) -> bool:
    """True when the model's chat template renders tools (it reads a ``tools`` variable), Ollama's
    ``tools`` capability (Ollama: the template uses ``.Tools``); without it a request with tools
    gets Ollama's 400 "... does not support tools"."""
    return "tools" in chat_template


def no_tools(name: str) -> str:
    """Ollama's refusal of tools for a model without them ("<model> does not support tools"; clients
    look for that phrase), with the reason."""
    return f"{name} does not support tools (its chat template has none)"


def think_fields(body: dict, name: str, chat_template: str) -> dict[str, Any]:
    """llama-server fields for ``think``: a model without thinking gets Ollama's 400."""
    think = body.get("think")
    if think is None:
        return {}
    if not isinstance(think, (bool, str)):
        raise RequestError(400, f"think {think!r} must be true, false, or \"low\"/\"medium\"/\"high\"")
    if not supports_thinking(chat_template):
        if think is False:
            return {}
        raise RequestError(400, f"\"{name}\" does not support thinking")
    on = think if isinstance(think, bool) else True
    f: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": on}, "reasoning_format": "deepseek" if on else "none"}
    if isinstance(think, str):
        f["chat_template_kwargs"]["reasoning_effort"] = think
    return f


def logprob_fields(body: dict, *, chat: bool) -> dict[str, Any]:
    lp, top = body.get("logprobs"), body.get("top_logprobs")
    if lp is None and top is None:
        return {}
    if lp is not None and not isinstance(lp, bool):
        raise RequestError(400, "logprobs must be true or false")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= 20):
        raise RequestError(400, "top_logprobs must be an integer from 0 to 20")
    if not lp and not top:
        return {}
    if chat:
        return {"logprobs": True, "top_logprobs": top or 0}
    return {"n_probs": max(top or 0, 1)}


def _tool_call_to_openai(tc: Any, i: int) -> dict:
    if not isinstance(tc, dict) or not isinstance(tc.get("function"), dict):
        raise RequestError(400, "messages[].tool_calls[] must be objects with a function {name, arguments}")
    fn = tc["function"]
    args = fn.get("arguments", {})
    return {"id": tc.get("id") or f"call_{i}", "type": "function",
            "function": {"name": fn.get("name", ""), "arguments": args if isinstance(args, str) else json.dumps(args)}}


def chat_messages(messages: Any) -> list[dict]:
    """Ollama messages -> OpenAI messages for llama-server (tool calls with string
    arguments and ids, tool results with ``tool_call_id``/``name``). A message's ``images``
    stay as they are, for ``media.attach_images`` to check and turn into content parts."""
    if not isinstance(messages, list):
        raise RequestError(400, "messages must be a list of {role, content} objects")
    out: list[dict] = []
    last_ids: list[str] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(400, f"messages[{i}] must be an object with a role and content")
        role = m["role"]
        if role not in ("system", "user", "assistant", "tool"):
            raise RequestError(400, f"messages[{i}].role {role!r}; allowed: system, user, assistant, tool")
        content = m.get("content", "")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise RequestError(400, f"messages[{i}].content must be a string")
        msg: dict[str, Any] = {"role": role, "content": content}
        if m.get("images") is not None:
            msg["images"] = m["images"]  # left for media.attach_images (checked and translated there)
        if role == "assistant" and m.get("tool_calls"):
            if not isinstance(m["tool_calls"], list):
                raise RequestError(400, f"messages[{i}].tool_calls must be a list")
            msg["tool_calls"] = [_tool_call_to_openai(tc, j) for j, tc in enumerate(m["tool_calls"])]
            last_ids = [tc["id"] for tc in msg["tool_calls"]]
        if role == "assistant" and isinstance(m.get("thinking"), str):
            msg["reasoning_content"] = m["thinking"]
        if role == "tool":
            name = m.get("tool_name") or m.get("name")
            if name:
                msg["name"] = name
            msg["tool_call_id"] = m.get("tool_call_id") or (last_ids.pop(0) if last_ids else f"call_{i}")
        out.append(msg)
    return out


def tools(body: dict) -> list | None:
    t = body.get("tools")
    if t is None:
        return None
    if not isinstance(t, list) or not all(isinstance(x, dict) and isinstance(x.get("function"), dict) for x in t):
        raise RequestError(400, "tools must be a list of {type: \"function\", function: {name, description, "
                                "parameters}} objects")
    return [{"type": x.get("type", "function"), "function": x["function"]} for x in t]


def tool_calls_from_openai(calls: list[dict]) -> list[dict]:
    """OpenAI tool calls (string arguments) -> Ollama's (argument object, index)."""
    out = []
    for i, c in enumerate(calls):
        fn = c.get("function") or {}
        args = fn.get("arguments") or "{}"
        try:
            parsed = json.loads(args) if isinstance(args, str) else args
        except json.JSONDecodeError:
            parsed = {"_raw": args}
        out.append({"function": {"index": i, "name": fn.get("name", ""), "arguments": parsed}})
    return out


def tool_calls_from_text(text: str, tool_names: set[str], *, leading: bool = False) -> list[dict] | None:
    """Tool calls a model wrote as plain JSON instead of in its template's tool-call
    syntax (Qwen2.5-Coder answers ``{"name": ..., "arguments": {...}}`` without the
    ``<tool_call>`` tags its template asks for), as Ollama's tool parser accepts them:
    one object or a list of objects, optionally in ``<tool_call>`` tags or a ```json
    fence, each naming one of ``tool_names``. With ``leading`` (a request that demands a
    call: OpenAI's ``tool_choice`` "required" or a named function), the JSON value the text
    starts with counts and what follows it is ignored (under llama-server's tool grammar
    Qwen2.5-Coder writes the call, then runs on: ``{...}.json ```json ...``). OpenAI-shaped
    calls, or None."""
    t = text.strip()
    for a, b in (("<tool_call>", "</tool_call>"), ("```json", "```"), ("```", "```")):
        if t.startswith(a) and (leading or (t.endswith(b) and len(t) >= len(a) + len(b))):
            t = t[len(a):].strip()
            if not leading:
                t = t[:len(t) - len(b)].strip()
            break
    if not t.startswith(("{", "[")):
        return None
    try:
        obj = json.JSONDecoder().raw_decode(t)[0] if leading else json.loads(t)
    except ValueError:
        return None
    items = obj if isinstance(obj, list) else [obj]
    calls = []
    for i, it in enumerate(items):
        if not (isinstance(it, dict) and it.get("name") in tool_names and isinstance(it.get("arguments", {}), dict)):
            return None
        calls.append({"id": f"call_{i}", "type": "function",
                      "function": {"name": it["name"], "arguments": json.dumps(it.get("arguments", {}))}})
    return calls or None


def logprobs_from_openai(lp: dict | None) -> list[dict] | None:
    if not lp or not lp.get("content"):
        return None
    return [{"token": e.get("token", ""), "logprob": e.get("logprob"), "bytes": e.get("bytes"),
             "top_logprobs": [{"token": t.get("token", ""), "logprob": t.get("logprob"), "bytes": t.get("bytes")}
                              for t in e.get("top_logprobs") or []]} for e in lp["content"]]


def logprobs_from_native(probs: list[dict] | None) -> list[dict] | None:
    if not probs:
        return None
    return [{"token": e.get("token", ""), "logprob": e.get("logprob"), "bytes": e.get("bytes"),
             "top_logprobs": [{"token": t.get("token", ""), "logprob": t.get("logprob"), "bytes": t.get("bytes")}
                              for t in e.get("top_logprobs") or []]} for e in probs]


def done_reason(finish: str | None) -> str:
    """Ollama's done_reason for an OpenAI finish_reason or a llama-server stop_type."""
    return {"length": "length", "limit": "length"}.get(finish or "", "stop")


def timings(t: dict | None, total_s: float, load_s: float) -> dict[str, int]:
    """Ollama's timing fields (ns, counts) from llama-server's ``timings``."""
    t = t or {}
    return {"total_duration": int(total_s * 1e9), "load_duration": int(load_s * 1e9),
            "prompt_eval_count": int(t.get("prompt_n", 0) or 0),
            "prompt_eval_duration": int((t.get("prompt_ms", 0) or 0) * 1e6),
            "eval_count": int(t.get("predicted_n", 0) or 0),
            "eval_duration": int((t.get("predicted_ms", 0) or 0) * 1e6)}


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


class ThinkSplitter:
    """Splits a completion into Ollama's ``thinking`` and ``response``, streamed or whole.

    llama-server's ``/completion`` (what ``/api/generate`` runs on) returns the model's raw
    text, tags included; only its chat endpoint parses reasoning. The rule: thinking is the
    text inside a ``<think>...</think>`` block that opens the completion (after leading
    whitespace), or, when the prompt itself ends with ``<think>`` (templates that open the
    block for the model), the text up to ``</think>``; an unclosed block is thinking to the
    end; everything else is the response. Feed pieces in order with :meth:`feed`, then call
    :meth:`finish`; each returns ``(thinking, response)`` text to emit now. A piece that may
    be the start of a tag is held until the next one decides.

    Args:
        prompt: the prompt text as sent (after the chat template), to see whether it opens the block.
    """

    def __init__(self, prompt: str = ""):
        self.state = "thinking" if prompt.rstrip().endswith(THINK_OPEN) else "start"
        self.held = ""
        self.started = False  # thinking text emitted yet (its leading whitespace is dropped)

    def _think(self, text: str) -> str:
        if not self.started:
            text = text.lstrip()
            self.started = bool(text)
        return text

    def feed(self, piece: str) -> tuple[str, str]:
        text, self.held = self.held + piece, ""
        thinking = answer = ""
        if self.state == "start":
            lead = text.lstrip()
            if lead.startswith(THINK_OPEN):
                self.state, text = "thinking", lead[len(THINK_OPEN):]
            elif THINK_OPEN.startswith(lead):  # "", "<", "<th"...: not decided yet
                self.held = text
                return "", ""
            else:
                self.state = "answer"
        if self.state == "thinking":
            end = text.find(THINK_CLOSE)
            if end >= 0:
                thinking, text = self._think(text[:end]), text[end + len(THINK_CLOSE):]
                self.state = "answer_start"
            else:
                keep = next((k for k in range(len(THINK_CLOSE) - 1, 0, -1) if text.endswith(THINK_CLOSE[:k])), 0)
                self.held = text[len(text) - keep:] if keep else ""
                return self._think(text[:len(text) - keep]), ""
        if self.state == "answer_start":
            text = text.lstrip()
            if not text:
                return thinking, ""
            self.state = "answer"
        answer = text
        return thinking, answer

    def finish(self) -> tuple[str, str]:
        """What is still held: an undecided start is response, a partial tag inside thinking is thinking."""
        text, self.held = self.held, ""
        if self.state == "thinking":
            return self._think(text), ""
        return "", text if self.state != "answer_start" else text.lstrip()


def split_thinking(text: str, prompt: str = "") -> tuple[str, str]:
    """(thinking, response) of a whole completion, by :class:`ThinkSplitter`'s rule."""
    sp = ThinkSplitter(prompt)
    parts = [sp.feed(text), sp.finish()]
    return "".join(p[0] for p in parts).strip(), "".join(p[1] for p in parts)
