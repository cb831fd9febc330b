"""OpenAI's API on top of llama-server: what ``routes_openai`` checks and changes on the way.

The body goes to llama-server as the client sent it, but for what is checked and changed here:

- **Validation** (:func:`validate`, pydantic models :class:`ChatRequest`,
  :class:`CompletionRequest`, :class:`EmbeddingRequest`): ``model`` required, the fields OpenAI types and bounds,
  with OpenAI's ranges (:data:`RANGES`: ``temperature`` 0–2, ``top_p`` 0–1, ``max_tokens`` from
  1, ``n`` from 1, penalties −2–2, ``top_logprobs`` 0–20), ``messages`` non-empty, ``tools`` a
  list of functions, ``tool_choice`` in OpenAI's forms, an embeddings ``input`` of text or
  token ids. A bad field is a 400 in OpenAI's error shape, ``param`` naming it (llama-server
  accepts ``temperature: -1`` and ``messages: []``, and answers some bad types with a 500).
  Fields OpenAI does not define (llama-server's own: ``ignore_eos``, ``cache_prompt``,
  ``grammar``, ...) pass unchecked.
- **Tools** (:func:`prepare_chat`): a model whose chat template has no tools gets Ollama's 400
  (``smollm2-135m does not support tools``) for ``tools`` unless ``tool_choice`` is
  ``"none"``; the object form ``{"type": "function", "function": {"name": N}}``, which
  llama-server does not read, becomes ``"required"`` over that one tool (what OpenAI's form
  means); ``n`` above the slots is a 400 naming ``-np``.
- **Tool calls a model writes as plain JSON** (:class:`ChatAnswer`): Qwen2.5-Coder answers
  ``{"name": ..., "arguments": ...}`` (often in a ```json fence) instead of the ``<tool_call>``
  tags its template asks for, so llama-server's parser returns it as content; it is turned
  into ``tool_calls`` when it names an offered tool, as Ollama's parser accepts it and
  ``/api/chat`` does (``ollama.tool_calls_from_text``), streamed too (text that may be a call
  is held back until it is known not to be one).
- **The Responses API** (:func:`prepare_responses`, :class:`ResponsesAnswer`): validated
  (:class:`ResponsesRequest`), ``text.format`` sent as chat's ``response_format`` (llama-server's
  conversion ignores ``text``), tools as for chat (:func:`tool_plan`), a plain-JSON call as a
  ``function_call`` output item (not streamed).
- **Fill-in-the-middle** (:func:`infill_body`, :class:`InfillAnswer`): ``/v1/completions`` with a
  ``suffix`` runs through llama-server's ``/infill`` and answers as a legacy completion.
- **A character cut by max_tokens** (:func:`drop_cut_character`): llama-server's non-streamed
  answer ends in U+FFFD where the last token ended inside a UTF-8 character, its stream drops
  those bytes; both drop them here, as Ollama's runner does (``flushPending`` trims the
  incomplete bytes), so one request's answer is the same text either way.

llama-server's 500s that are the request's fault (an embeddings input longer than the batch, an
image for a model without a projector) become 400s in ``errors.upstream_error``, for both APIs.
"""
from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .ollama import RequestError, no_tools, supports_tools, tool_calls_from_text

#: The largest max_tokens llama-server can take: its n_predict is a 32-bit int (a larger
#: value wraps to a negative one, "got -2147483648").
INT32_MAX = (1 << 31) - 1

#: OpenAI's bounds for the numeric request fields (its API reference), inclusive; one place, used
#: by the models below and by their error messages. max_tokens' top is llama-server's.
RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0, 2), "top_p": (0, 1), "presence_penalty": (-2, 2), "frequency_penalty": (-2, 2),
    "max_tokens": (1, INT32_MAX), "max_completion_tokens": (1, INT32_MAX), "max_output_tokens": (1, INT32_MAX),
    "n": (1, 128), "top_logprobs": (0, 20),
}


def _num(name: str, kind: type = float) -> Any:
    lo, hi = RANGES[name]
    return Annotated[kind | None, Field(None, strict=True, ge=lo, le=hi)]


class _Open(BaseModel):
    """Fields OpenAI does not define pass (llama-server has many of its own)."""

    model_config = ConfigDict(extra="allow")


#: A function's name, as OpenAI bounds it.
ToolName = Annotated[str, Field(strict=True, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]


class Function(_Open):
    name: ToolName
    description: Annotated[str | None, Field(None, strict=True)]
    parameters: dict[str, Any] | None = None


class Tool(_Open):
    type: Literal["function"] = "function"
    function: Function


class Message(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None


#: ``model``: required, as OpenAI requires it (absent: "you must provide a model parameter").
ModelField = Annotated[str, Field(strict=True, min_length=1)]


class _Sampling(_Open):
    model: ModelField
    stream: Annotated[bool | None, Field(None, strict=True)]
    temperature: _num("temperature")
    top_p: _num("top_p")
    presence_penalty: _num("presence_penalty")
    frequency_penalty: _num("frequency_penalty")
    n: _num("n", int)
    seed: Annotated[int | None, Field(None, strict=True)]
    stop: str | list[str] | None = None


class ChatRequest(_Sampling):
    """``POST /v1/chat/completions``: the fields OpenAI types and bounds."""

    messages: Annotated[list[Message], Field(min_length=1)]
    max_tokens: _num("max_tokens", int)
    max_completion_tokens: _num("max_completion_tokens", int)
    logprobs: Annotated[bool | None, Field(None, strict=True)]
    top_logprobs: _num("top_logprobs", int)
    tools: list[Tool] | None = None
    tool_choice: Any = None

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, v: Any) -> Any:
        if v is None or v in ("none", "auto", "required"):
            return v
        if (isinstance(v, dict) and v.get("type") == "function" and isinstance(v.get("function"), dict)
                and isinstance(v["function"].get("name"), str)):
            return v
        raise ValueError('must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}')


class CompletionRequest(_Sampling):
    """``POST /v1/completions``: as :class:`ChatRequest`; ``max_tokens`` may be 0 here (the legacy
    API's echo of the prompt alone)."""

    prompt: Any = None
    max_tokens: Annotated[int | None, Field(None, strict=True, ge=0, le=INT32_MAX)]
    logprobs: Any = None
    suffix: Annotated[str | None, Field(None, strict=True)]
    echo: Annotated[bool | None, Field(None, strict=True)]

    @field_validator("logprobs")
    @classmethod
    def _logprobs(cls, v: Any) -> Any:
        if v is None or isinstance(v, bool) or (isinstance(v, int) and 0 <= v <= 20):
            return v
        raise ValueError("must be the number of most likely tokens to return, 0 to 20")

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, v: Any) -> Any:
        if _text_or_tokens(v):
            return v
        raise ValueError("must be a string, a list of strings, a list of token ids or a list of such lists")


class _Typed(_Open):
    """An object whose ``type`` makes a field required: ``needs`` = (the type, the field, the
    message when it is missing)."""

    needs: ClassVar[tuple[str, str, str]]

    @model_validator(mode="after")
    def _needed(self) -> "_Typed":
        kind, name, why = self.needs
        if getattr(self, "type") == kind and getattr(self, name) is None:
            raise ValueError(why)
        return self


class ResponseFormat(_Typed):
    """``text.format`` of a Responses request: ``text``, ``json_object``, or ``json_schema`` with
    the schema beside ``name`` (not nested as in chat's ``response_format``)."""

    needs = ("json_schema", "schema_", "a json_schema format needs its 'schema' (a JSON schema object)")
    type: Literal["text", "json_object", "json_schema"]
    name: Annotated[str | None, Field(None, strict=True)]
    schema_: Annotated[dict[str, Any] | None, Field(None, alias="schema")]


class ResponseText(_Open):
    format: ResponseFormat | None = None


class ResponseTool(_Typed):
    """A Responses tool: ``{"type": "function", "name": ..., "parameters": ...}`` (flat, not
    under ``function``). Other types (web search, file search, ...) llama-server skips."""

    needs = ("function", "name", "a function tool needs its 'name'")
    type: Annotated[str, Field(strict=True)]
    name: ToolName | None = None


class ResponsesRequest(_Open):
    """``POST /v1/responses``: the fields OpenAI types and bounds; the rest (``input``'s items,
    ``instructions``) llama-server converts to a chat request and checks itself."""

    model: ModelField
    input: Any
    stream: Annotated[bool | None, Field(None, strict=True)]
    temperature: _num("temperature")
    top_p: _num("top_p")
    max_output_tokens: _num("max_output_tokens", int)
    tools: list[ResponseTool] | None = None
    tool_choice: Any = None
    text: ResponseText | None = None

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, v: Any) -> Any:
        if v is None or v in ("none", "auto", "required"):
            return v
        if isinstance(v, dict) and v.get("type") == "function" and isinstance(v.get("name"), str):
            return v
        raise ValueError('must be "none", "auto", "required" or {"type": "function", "name": ...}')


class EmbeddingRequest(_Open):
    """``POST /v1/embeddings``: ``input`` is text, a list of texts, token ids or lists of them."""

    model: ModelField
    input: Any
    encoding_format: Literal["float", "base64"] | None = None

    @field_validator("input")
    @classmethod
    def _input(cls, v: Any) -> Any:
        if _text_or_tokens(v) and v != [] and v != "":
            return v
        raise ValueError("must be a non-empty string, a list of strings, a list of token ids or a list of such "
                         "lists")


def _ids(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in v)


def _text_or_tokens(v: Any) -> bool:
    return (isinstance(v, str) or _ids(v) or
            (isinstance(v, list) and (all(isinstance(s, str) for s in v) or all(_ids(s) and s for s in v))))


def _param(loc: tuple) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def validate(model: type[BaseModel], body: dict) -> BaseModel:
    """``body`` checked against ``model``; RequestError(400) in OpenAI's terms for the first bad
    field: ``Invalid 'temperature': 5 is out of range; allowed: 0 to 2``, ``param`` the field's
    path (``messages``, ``tools[0].function.name``)."""
    try:
        return model.model_validate(body)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        loc = tuple(err["loc"])
        param = _param(loc) or "body"
        kind, given = err["type"], err.get("input")
        if kind in ("greater_than_equal", "less_than_equal") and loc and loc[-1] in RANGES:
            lo, hi = RANGES[str(loc[-1])]
            if isinstance(lo, int) and isinstance(hi, int) and hi == INT32_MAX:
                allowed = f"{lo} to {hi} (llama-server's n_predict is a 32-bit int; generation also ends where " \
                          "the context is full)"
            else:
                allowed = f"{lo:g} to {hi:g}"
            if loc[-1] == "n":
                allowed += " (and at most the server's slots, -np)"
            msg = f"Invalid '{param}': {json.dumps(given)} is out of range; allowed: {allowed}"
        elif kind == "greater_than_equal":  # completions' max_tokens
            msg = f"Invalid '{param}': {json.dumps(given)} is below the minimum {err['ctx']['ge']}"
        elif kind == "too_short" and param == "messages":
            msg = "Invalid 'messages': empty array; expected at least one message"
        elif kind == "missing" and param == "model":
            msg = "you must provide a model parameter"
        elif kind == "missing":
            msg = f"Missing required parameter: '{param}'"
        else:
            text = err["msg"].removeprefix("Value error, ")
            shown = json.dumps(given)[:80] if isinstance(given, (str, int, float, bool, list, dict)) or given is None \
                else repr(given)[:80]
            msg = f"Invalid '{param}': {text[:1].lower() + text[1:]} (got {shown})"
        raise RequestError(400, msg, param=param, code="invalid_value" if kind != "missing" else "missing_required")


def check_n(n: int | None, n_parallel: int) -> None:
    """RequestError(400) for ``n`` choices above the ``n_parallel`` slots: llama-server runs each
    choice in a slot of its own (its message, "Value must be between 1 <= value <= 1", names
    neither ``-np`` nor the variable)."""
    if n is not None and n > n_parallel:
        raise RequestError(400, f"Invalid 'n': {n} choices need {n} slots and this server runs {n_parallel} "
                                f"(-np / OLLAMA_NUM_PARALLEL); allowed: 1 to {n_parallel}, or serve with a larger -np",
                           param="n", code="invalid_value")


def tool_plan(names: list[str], choice: Any, wanted: str | None, model_name: str,
              chat_template: str) -> tuple[str | None, set[str], bool]:
    """What a request's tools need, for the chat and the Responses routes alike: ``(action,
    tool_names, demanded)``. ``names``: the offered functions; ``choice``: ``tool_choice``;
    ``wanted``: the function its object form names, else None. ``action``: None (send the tools
    as they are), ``"drop"`` (send no tools: ``tool_choice`` "none" for a template without
    them) or ``"only"`` (send only ``wanted``, with ``tool_choice`` "required": what the object
    form means; llama-server does not read it); ``tool_names``: the tools whose plain-JSON calls
    the answer's rewrite recognises (none with "none"); ``demanded``: a call is required.

    RequestError(400): ``tool_choice`` "required" or a named function without tools, tools for
    a template without them, a named tool that is not offered."""
    if not names:
        if wanted is not None or choice == "required":
            raise RequestError(400, f"Invalid 'tool_choice': {json.dumps(choice)} needs 'tools'", param="tool_choice",
                               code="invalid_value")
        return None, set(), False
    if not supports_tools(chat_template):
        if choice == "none":
            return "drop", set(), False
        raise RequestError(400, f"{no_tools(model_name)}; send the request without tools, or with tool_choice "
                                "\"none\"", param="tools", code="invalid_value")
    if wanted is not None:
        if wanted not in names:
            raise RequestError(400, f"Invalid 'tool_choice': function {wanted!r} is not among the tools ("
                                    f"{', '.join(names)})", param="tool_choice", code="invalid_value")
        return "only", {wanted}, True
    return None, set() if choice == "none" else set(names), choice == "required"


def prepare_chat(body: dict, req: ChatRequest, model_name: str, chat_template: str,
                 n_parallel: int) -> tuple[dict | None, ChatAnswer]:
    """What a valid chat request needs before it goes to llama-server: ``(new_body, answer)``:
    ``new_body`` is None when the client's bytes can go unchanged, else the body to send
    (:func:`tool_plan`'s changes); ``answer`` the :class:`ChatAnswer` rewrite, with the offered
    tools whose plain-JSON calls it recognises and whether a call is demanded.

    RequestError(400): ``n`` above ``n_parallel`` (llama-server runs each choice in a slot),
    and :func:`tool_plan`'s refusals.
    """
    check_n(req.n, n_parallel)
    choice = req.tool_choice
    wanted = choice["function"]["name"] if isinstance(choice, dict) else None
    action, names, demanded = tool_plan([t.function.name for t in req.tools or []], choice, wanted, model_name,
                                        chat_template)
    if action == "drop":
        return {k: v for k, v in body.items() if k not in ("tools", "tool_choice")}, ChatAnswer()
    if action == "only":
        return (dict(body, tool_choice="required", tools=[t for t in body["tools"] if t["function"]["name"] == wanted]),
                ChatAnswer(names, demanded=True))
    return None, ChatAnswer(names, demanded=demanded)


def prepare_responses(body: dict, req: ResponsesRequest, model_name: str,
                      chat_template: str) -> tuple[dict, ResponsesAnswer]:
    """A Responses request (checked: :class:`ResponsesRequest`) made ready for llama-server's
    ``/v1/responses``, which converts it to a chat request: ``(body_to_send, answer)``.
    ``text.format`` becomes chat's ``response_format`` (llama-server's conversion ignores
    ``text``, so a json_schema would not constrain anything): ``json_schema`` -> ``{"type":
    "json_schema", "json_schema": {"name", "schema"}}``, ``json_object`` -> ``{"type":
    "json_object"}``; tools as :func:`tool_plan` says (the object form of ``tool_choice``,
    ``{"type": "function", "name": N}``, as "required" over that one tool). ``answer``: the
    :class:`ResponsesAnswer` that turns a plain-JSON call into a ``function_call`` item.
    RequestError(400): :func:`tool_plan`'s refusals."""
    out = {k: v for k, v in body.items() if k != "text"}
    fmt = req.text.format if req.text is not None else None
    if fmt is not None and fmt.type == "json_schema":
        out["response_format"] = {"type": "json_schema",
                                  "json_schema": {"name": fmt.name or "format", "schema": fmt.schema_}}
    elif fmt is not None and fmt.type == "json_object":
        out["response_format"] = {"type": "json_object"}
    choice = req.tool_choice
    wanted = choice["name"] if isinstance(choice, dict) else None
    tools = [t for t in body.get("tools") or [] if t.get("type") == "function"]
    action, names, demanded = tool_plan([t["name"] for t in tools], choice, wanted, model_name, chat_template)
    if action == "drop":
        out.pop("tools", None)
        out.pop("tool_choice", None)
    elif action == "only":
        out.update(tool_choice="required", tools=[t for t in tools if t["name"] == wanted])
    return out, ResponsesAnswer(names, demanded)


def answer_json(data: bytes, key: str = "choices", kind: type = list) -> dict | None:
    """A whole (non-streamed) answer parsed: the JSON object when its ``key`` is a ``kind`` (an
    OpenAI answer's ``choices`` list, a Responses answer's ``output``, llama-server's native
    ``content``), else None (not JSON, an error body, another shape: the caller leaves it as sent)."""
    try:
        j = json.loads(data)
    except ValueError:
        return None
    return j if isinstance(j, dict) and isinstance(j.get(key), kind) else None


REPLACEMENT = "\ufffd"


def drop_cut_character(text: str, finish_reason: str | None) -> str:
    """``text`` without the U+FFFD llama-server puts where max_tokens cut a UTF-8 character
    (only at the end of an answer that stopped for length); as its stream and Ollama do."""
    if finish_reason == "length" and text.endswith(REPLACEMENT):
        return text.rstrip(REPLACEMENT)
    return text


class ChatAnswer:
    """Rewrites one ``/v1/chat/completions`` or ``/v1/completions`` answer (a
    :class:`~.proxy.Rewrite`): a plain-JSON tool call of an offered tool becomes ``tool_calls``
    (``tool_names``; empty: none are looked for), and a character cut by max_tokens is dropped.
    Streamed, only the tool calls need a rewrite (the stream already drops a cut character):
    ``streams`` says whether the stream must go line by line through :meth:`sse_line`.
    ``demanded``: the request requires a call (``tool_choice`` "required" or a named function),
    so the JSON value the answer starts with is the call, whatever follows it; streamed, the
    answer ends as soon as that value is complete (``finished``: the relay closes the stream,
    which stops the generation), since what a model writes after it is not part of the call."""

    def __init__(self, tool_names: set[str] | None = None, demanded: bool = False):
        self.tool_names = tool_names or set()
        self.demanded = demanded  # a call is required: the leading JSON counts (tool_calls_from_text)
        self.streams = bool(self.tool_names)
        self.held: dict[int, str] = {}          # per choice: content held back (it may be a tool call)
        self.released: set[int] = set()         # choices whose content is known not to be a call
        self.finished = False                   # the stream is complete: the relay stops reading

    def body(self, data: bytes) -> bytes:
        """A whole answer rewritten; the same bytes when nothing changes (parsed only when needed)."""
        if not self.tool_names and REPLACEMENT.encode() not in data:
            return data
        j = answer_json(data)
        if j is None:
            return data
        for ch in j["choices"]:
            if not isinstance(ch, dict):
                continue
            fin = ch.get("finish_reason")
            msg = ch.get("message") if isinstance(ch.get("message"), dict) else None
            key, holder = ("content", msg) if msg is not None else ("text", ch)
            if isinstance(holder.get(key), str):
                holder[key] = drop_cut_character(holder[key], fin)
            if msg is not None and self.tool_names and not msg.get("tool_calls") and isinstance(msg.get("content"), str):
                calls = tool_calls_from_text(msg["content"], self.tool_names, leading=self.demanded)
                if calls:
                    msg["tool_calls"], msg["content"] = calls, None
                    ch["finish_reason"] = "tool_calls"
        return json.dumps(j, ensure_ascii=False).encode()

    def _event(self, ev: dict) -> bytes:
        return b"data: " + json.dumps(ev, ensure_ascii=False).encode() + b"\n\n"

    def sse_line(self, line: bytes) -> bytes:
        """One SSE line of a streamed chat answer: content that may be a tool call is held back per
        choice (text starting with ``{``, ``[``, ``<`` or a fence); at the choice's finish it goes
        out as ``tool_calls`` deltas (index, id, type, function name and arguments; finish_reason
        ``tool_calls``) when it parses as a call of an offered tool, else as one content delta."""
        if not line.startswith(b"data:"):
            return line
        payload = line[5:].strip()
        if not payload.startswith(b"{"):
            return line
        try:
            ev = json.loads(payload)
        except ValueError:
            return line
        choices = ev.get("choices") if isinstance(ev, dict) else None
        if not isinstance(choices, list):
            return line
        out = b""
        for ch in choices:
            i = ch.get("index", 0)
            d = ch.get("delta") or {}
            if d.get("tool_calls"):  # llama-server parsed a call itself
                self.released.add(i)
            piece = d.get("content")
            if isinstance(piece, str) and piece and i not in self.released:
                held = self.held.get(i, "") + piece
                if held.lstrip()[:1] in ("", "{", "[", "<", "`"):
                    self.held[i] = held
                    d.pop("content")
                else:
                    d["content"] = held
                    self.held.pop(i, None)
                    self.released.add(i)
            early = (self.demanded and len(choices) == 1 and i in self.held and not ch.get("finish_reason")
                     and tool_calls_from_text(self.held[i], self.tool_names, leading=True) is not None)
            if early:  # the demanded call is complete: end here (the relay then stops the generation)
                ch["finish_reason"], self.finished = "tool_calls", True
            if ch.get("finish_reason") and i in self.held:
                held = self.held.pop(i)
                calls = tool_calls_from_text(held, self.tool_names, leading=self.demanded)
                base = {k: v for k, v in ev.items() if k != "choices"}
                if calls:
                    deltas = [{"index": n, "id": c["id"], "type": "function", "function": c["function"]}
                              for n, c in enumerate(calls)]
                    out += self._event({**base, "choices": [{"index": i, "delta": {"tool_calls": deltas},
                                                             "finish_reason": None}]})
                    ch["finish_reason"] = "tool_calls"
                else:
                    out += self._event({**base, "choices": [{"index": i, "delta": {"content": held},
                                                             "finish_reason": None}]})
        out += b"data: " + json.dumps(ev, ensure_ascii=False).encode() + b"\n"
        return out + b"\ndata: [DONE]\n" if self.finished else out


class ResponsesAnswer:
    """Rewrites one non-streamed ``/v1/responses`` answer (a :class:`~.proxy.Rewrite`): a
    ``message`` output item whose text is a plain-JSON call of an offered tool (Qwen2.5-Coder's;
    :func:`~.ollama.tool_calls_from_text`, as :class:`ChatAnswer` reads chat answers) becomes
    ``function_call`` items as llama-server writes parsed calls (``id`` ``fc_...``, ``call_id``,
    ``name``, ``arguments`` as a JSON string, ``status`` completed). A stream is relayed as it
    comes (``streams`` false): its events already went out when the text is known to be a call."""

    streams = False

    def __init__(self, tool_names: set[str] | None = None, demanded: bool = False):
        self.tool_names = tool_names or set()
        self.demanded = demanded

    def body(self, data: bytes) -> bytes:
        j = answer_json(data, "output") if self.tool_names else None
        items = j["output"] if j is not None else []
        if not items or any(isinstance(i, dict) and i.get("type") == "function_call" for i in items):
            return data
        out, changed = [], False
        for item in items:
            calls = None
            if isinstance(item, dict) and item.get("type") == "message" and isinstance(item.get("content"), list):
                text = "".join(p.get("text", "") for p in item["content"]
                               if isinstance(p, dict) and p.get("type") == "output_text")
                calls = tool_calls_from_text(text, self.tool_names, leading=self.demanded)
            if not calls:
                out.append(item)
                continue
            changed = True
            for c in calls:
                cid = c["id"].removeprefix("call_")
                out.append({"id": f"fc_{cid}", "type": "function_call", "status": "completed",
                            "arguments": c["function"]["arguments"], "call_id": f"call_{cid}",
                            "name": c["function"]["name"]})
        if not changed:
            return data
        j["output"] = out
        return json.dumps(j, ensure_ascii=False).encode()

    def sse_line(self, line: bytes) -> bytes:
        return line


def infill_body(body: dict, req: CompletionRequest) -> dict:
    """A ``/v1/completions`` request with a ``suffix`` as llama-server's ``/infill`` body (the
    model's FIM tokens around ``prompt`` and ``suffix``): ``input_prefix``, ``input_suffix``,
    ``n_predict`` from ``max_tokens``, ``stop`` as a list; the other fields as sent.
    RequestError(400) for what fill-in-the-middle does not take here: a prompt that is not one
    string, ``logprobs``, ``n`` above 1."""
    if not isinstance(req.prompt, str):
        raise RequestError(400, "Invalid 'prompt': with 'suffix' (fill-in-the-middle) the prompt must be one string, "
                                "the text before the insertion point", param="prompt", code="invalid_value")
    for key, bad in (("logprobs", req.logprobs not in (None, False)), ("n", (req.n or 1) > 1)):
        if bad:
            raise RequestError(400, f"Invalid '{key}': not supported with 'suffix' (fill-in-the-middle runs through "
                                    "llama-server's /infill, which gives one answer without logprobs)", param=key,
                               code="invalid_value")
    out = {k: v for k, v in body.items() if k not in ("prompt", "suffix", "echo", "n", "logprobs")}
    out.update(input_prefix=req.prompt, input_suffix=req.suffix)
    if req.max_tokens is not None:
        out["n_predict"] = req.max_tokens
    if isinstance(req.stop, str):
        out["stop"] = [req.stop]
    return out


class InfillAnswer:
    """llama-server's ``/infill`` answer (its native shape: ``content``, ``stop``, ``stop_type``,
    ``tokens_evaluated``, ``tokens_predicted``) as OpenAI's legacy completion (a
    :class:`~.proxy.Rewrite`): ``{"object": "text_completion", "choices": [{"text", "index",
    "logprobs", "finish_reason"}], "usage"}``, streamed as ``text_completion`` chunks ending in
    ``data: [DONE]``. A character cut by max_tokens is dropped (:func:`drop_cut_character`)."""

    streams = True

    def __init__(self, model: str):
        import time
        import uuid

        self.model, self.id, self.created = model, f"cmpl-{uuid.uuid4().hex}", int(time.time())

    def _completion(self, j: dict, text: str, finish: str | None) -> dict:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": j.get("model", self.model),
                "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}]}

    @staticmethod
    def _finish(j: dict) -> str:
        return "length" if j.get("stop_type") == "limit" else "stop"

    def body(self, data: bytes) -> bytes:
        j = answer_json(data, "content", str)
        if j is None:
            return data
        finish = self._finish(j)
        out = self._completion(j, drop_cut_character(str(j["content"]), finish), finish)
        p, c = int(j.get("tokens_evaluated") or 0), int(j.get("tokens_predicted") or 0)
        out["usage"] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
        return json.dumps(out, ensure_ascii=False).encode()

    def sse_line(self, line: bytes) -> bytes:
        j = answer_json(line[5:].strip(), "content", str) if line.startswith(b"data:") else None
        if j is None:
            return line  # an error event passes as it is
        done = j.get("stop") is True
        chunk = self._completion(j, str(j["content"]), self._finish(j) if done else None)
        out = b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n"
        return out + b"\ndata: [DONE]\n" if done else out
