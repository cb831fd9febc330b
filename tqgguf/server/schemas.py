"""Request bodies of ``tqgguf serve``, validated strictly and up front.

Types are strict (``"max_tokens": "10"`` or ``"temperature": "hot"`` is a 400, not a
silent conversion); unknown fields are ignored, as OpenAI and Ollama clients send many.
Fields that change the answer in ways tqgguf does not implement (``n`` > 1, tools,
logprobs, JSON ``format``, images) are refused with a 400 that says so, instead of being
ignored.

Limits: ``max_tokens`` / ``max_completion_tokens`` must be >= 1; Ollama's
``num_predict`` may be -1 (until the end of the answer or the context), -2 (fill the
context) or >= 0. Values larger than what is left of the slot's context are clamped to it
(the answer then ends with finish_reason / done_reason ``length``), as llama.cpp does.
"""
from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..config import parse_duration


class RequestError(Exception):
    """A request the server refuses: HTTP ``status`` and a ``message`` for the client."""

    def __init__(self, status: int, message: str, *, code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


def _unsupported(value: Any, what: str) -> None:
    """Refuse a set value of a feature tqgguf does not implement (None, false, 0 and
    empty values are fine)."""
    if value is None or value is False or value == 0 or value in ([], {}, ""):
        return
    raise ValueError(f"{what} is not supported by tqgguf serve")


# -- OpenAI ------------------------------------------------------------------------------


class ContentPart(_Strict):
    type: str
    text: str | None = None

    @model_validator(mode="after")
    def _text_only(self):
        if self.type != "text" or self.text is None:
            raise ValueError(f"content part of type {self.type!r} is not supported (text only)")
        return self


class ChatMessage(_Strict):
    """An OpenAI chat message: role and text content (string or text parts)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text or "" for p in self.content)

    def as_dict(self) -> dict[str, str]:
        return {"role": "system" if self.role == "developer" else self.role, "content": self.text()}


class StreamOptions(_Strict):
    include_usage: bool = False


class _OpenAISampling(_Strict):
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=100.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repeat_penalty: float | None = Field(None, gt=0.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1)
    logprobs: Any = None
    top_logprobs: Any = None
    logit_bias: Any = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        if isinstance(v, str):
            v = [v]
        if v is not None:
            if len(v) > 16:
                raise ValueError("at most 16 stop strings")
            v = [s for s in v if s]
        return v

    @model_validator(mode="after")
    def _refuse_unsupported(self):
        if self.n not in (None, 1):
            raise ValueError("n > 1 is not supported by tqgguf serve (one choice per request)")
        _unsupported(self.logprobs, "logprobs")
        _unsupported(self.top_logprobs, "top_logprobs")
        _unsupported(self.logit_bias, "logit_bias")
        return self


class ChatCompletionRequest(_OpenAISampling):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    tools: Any = None
    tool_choice: Any = None
    functions: Any = None
    response_format: Any = None

    @model_validator(mode="after")
    def _chat_unsupported(self):
        _unsupported(self.tools, "tools")
        _unsupported(self.functions, "functions")
        if self.tool_choice not in (None, "none", "auto"):
            raise ValueError("tool_choice is not supported by tqgguf serve")
        if self.response_format not in (None, {"type": "text"}):
            raise ValueError("response_format other than text is not supported by tqgguf serve")
        return self

    @property
    def limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(_OpenAISampling):
    """``POST /v1/completions``: one prompt (a string, a one-string list or token ids)."""

    prompt: str | list[str] | list[int]
    suffix: str | None = None
    echo: bool = False
    best_of: int | None = None

    @model_validator(mode="after")
    def _completion_unsupported(self):
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], str) and len(self.prompt) != 1:
            raise ValueError("only one prompt per request is supported by tqgguf serve")
        _unsupported(self.suffix, "suffix")
        _unsupported(self.echo, "echo")
        if self.best_of not in (None, 1):
            raise ValueError("best_of is not supported by tqgguf serve")
        return self

    @property
    def limit(self) -> int | None:
        return self.max_tokens


# -- Ollama ------------------------------------------------------------------------------


class OllamaOptions(_Strict):
    """The Ollama ``options`` tqgguf applies (others are accepted and ignored, as Ollama
    ignores unknown ones); ``num_ctx`` cannot change a running slot and is ignored."""

    num_predict: int | None = Field(None, ge=-2)
    temperature: float | None = Field(None, ge=0.0, le=100.0)
    top_k: int | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repeat_penalty: float | None = Field(None, gt=0.0)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None
    stop: list[str] | None = None
    num_ctx: int | None = Field(None, ge=1)


class _OllamaBase(_Strict):
    model: str = Field(min_length=1)
    stream: bool = True
    format: Any = None
    options: OllamaOptions | None = None
    keep_alive: str | int | float | None = None
    tools: Any = None
    think: Any = None

    @field_validator("keep_alive")
    @classmethod
    def _keep_alive(cls, v):
        if v is None:
            return None
        return parse_duration(v)

    @model_validator(mode="after")
    def _refuse_unsupported(self):
        _unsupported(self.format, "format (structured output)")
        _unsupported(self.tools, "tools")
        return self

    @property
    def limit(self) -> int | None:
        n = self.options.num_predict if self.options else None
        if n is None or n == -1:
            return None
        if n == -2:
            return 1 << 62
        return n


class OllamaMessage(_Strict):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    images: list[Any] | None = None

    @model_validator(mode="after")
    def _no_images(self):
        _unsupported(self.images, "images")
        return self


class OllamaChatRequest(_OllamaBase):
    """``POST /api/chat``; an empty ``messages`` list only loads the model (Ollama)."""

    messages: list[OllamaMessage]


class OllamaGenerateRequest(_OllamaBase):
    """``POST /api/generate``; an empty prompt only loads the model (Ollama)."""

    prompt: str = ""
    system: str | None = None
    template: str | None = None
    suffix: str | None = None
    raw: bool = False
    context: list[int] | None = None
    images: list[Any] | None = None

    @model_validator(mode="after")
    def _generate_unsupported(self):
        _unsupported(self.template, "template")
        _unsupported(self.suffix, "suffix")
        _unsupported(self.images, "images")
        return self


class OllamaShowRequest(_Strict):
    """``POST /api/show`` (``model``, or the older ``name``)."""

    model: str | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _one(self):
        if not (self.model or self.name):
            raise ValueError("model is required")
        return self


# -- parsing -----------------------------------------------------------------------------


_TYPE_NAMES = {"str", "int", "float", "bool", "list", "dict", "none", "ContentPart"}


def _loc(err: dict) -> str:
    parts = [str(p) for p in err.get("loc", ())
             if not (isinstance(p, str) and ("[" in p or p.startswith("function-") or p in _TYPE_NAMES))]
    return ".".join(parts)


def parse_body(raw: bytes, model: type[BaseModel]) -> BaseModel:
    """Parse a request body into ``model``.

    Raises RequestError(400) for an empty body, malformed JSON, a non-object body, or
    fields that fail validation (the message lists each field and why).
    """
    if not raw.strip():
        raise RequestError(400, "request body is empty; expected a JSON object")
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RequestError(400, f"malformed JSON body: {e}") from None
    if not isinstance(obj, dict):
        raise RequestError(400, f"expected a JSON object, got {type(obj).__name__}")
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        msgs, first = [], None
        for err in e.errors(include_url=False):
            loc = _loc(err)
            first = first or loc.split(".")[0] or None
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "missing":
                msg = "field required"
            entry = f"{loc}: {msg}" if loc else msg
            if entry not in msgs:
                msgs.append(entry)
        raise RequestError(400, "invalid request: " + "; ".join(msgs[:6]), param=first) from None
