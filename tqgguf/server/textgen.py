"""Prompts, context shift and the token loop of ``tqgguf serve``.

Everything here runs on plain token lists and a :class:`Vocab` (the model's tokenizer,
loaded without weights so it stays available while the model is unloaded by keep-alive);
the Llama context that evaluates the tokens is handed in by the slot pool.

Context shift: a request whose prompt does not fit the slot's context (minus room for the
answer) is shortened before it is evaluated, the way chat front-ends do it: the system
messages stay, the oldest turns are dropped, and if the newest message alone is still too
long its beginning is cut. Raw text prompts lose their oldest tokens. The caller learns
what was dropped (:class:`Prompt`), and the server says so in a response header.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence


class PromptTooLongError(ValueError):
    """The prompt cannot be shortened enough to fit the context (e.g. a system prompt
    longer than the context); the message says how long it is and how much fits."""


class Vocab:
    """The model's tokenizer and chat template, loaded with ``vocab_only`` (no weights).

    Thread-safe for tokenizing and detokenizing (llama.cpp's vocab is read-only).
    """

    def __init__(self, model_path: str):
        import llama_cpp
        from llama_cpp import _internals

        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self._model = _internals.LlamaModel(path_model=str(model_path), params=params, verbose=False)
        self._llama_cpp = llama_cpp
        self.metadata: dict[str, str] = self._model.metadata()
        self.bos: int = self._model.token_bos()
        self.eos: int = self._model.token_eos()
        self.add_bos: bool = bool(self._model.add_bos_token())
        self.n_ctx_train: int = int(self._model.n_ctx_train())
        self.n_vocab: int = int(self._model.n_vocab())
        self._formatter = None
        self.chat_template: str | None = self.metadata.get("tokenizer.chat_template")

    def close(self) -> None:
        """Free the vocab (the object is unusable afterwards)."""
        self._model.close()

    def tokenize(self, text: str, *, add_bos: bool | None = None) -> list[int]:
        """Tokens of ``text`` with special tokens parsed; a BOS is prepended when the model
        wants one (``add_bos`` None) and the text does not already start with it."""
        toks = self._model.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        want_bos = self.add_bos if add_bos is None else add_bos
        if want_bos and self.bos >= 0 and (not toks or toks[0] != self.bos):
            toks = [self.bos] + toks
        return toks

    def piece(self, token: int) -> bytes:
        """The bytes of one generated token (special tokens render as empty)."""
        return self._model.detokenize([token], special=False) if token != self.bos else b""

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Text of a token list (invalid UTF-8 replaced)."""
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT, <|im_end|> ...)."""
        return bool(self._llama_cpp.llama_vocab_is_eog(self._model.vocab, token))

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        """The model's chat template applied to ``messages`` (role/content dicts), ending
        with the assistant generation prompt. Models without a template get ChatML.
        Raises ValueError when the template rejects the conversation."""
        if self._formatter is None:
            from llama_cpp import llama_chat_format

            if self.chat_template:
                eos_text = self._model.token_get_text(self.eos) if self.eos >= 0 else ""
                bos_text = self._model.token_get_text(self.bos) if self.bos >= 0 else ""
                self._formatter = llama_chat_format.Jinja2ChatFormatter(
                    template=self.chat_template, eos_token=eos_text, bos_token=bos_text)
            else:
                self._formatter = llama_chat_format.format_chatml
        try:
            return self._formatter(messages=messages).prompt
        except Exception as e:  # jinja errors, raise_exception() from the template
            raise ValueError(f"the model's chat template rejected the conversation: {e}") from e


@dataclass
class Prompt:
    """A prompt ready for a slot: tokens, and what context shift removed to fit.

    dropped_messages: oldest chat messages left out; trimmed_tokens: tokens cut from the
    start of the oldest kept message (chat) or of the raw prompt; n_ctx: slot context.
    """

    tokens: list[int]
    n_ctx: int
    dropped_messages: int = 0
    trimmed_tokens: int = 0

    @property
    def shifted(self) -> bool:
        return bool(self.dropped_messages or self.trimmed_tokens)

    def shift_note(self) -> str:
        """``dropped 4 messages, trimmed 12 tokens`` (empty when nothing was removed)."""
        parts = []
        if self.dropped_messages:
            parts.append(f"dropped {self.dropped_messages} oldest messages")
        if self.trimmed_tokens:
            parts.append(f"trimmed {self.trimmed_tokens} oldest tokens")
        return ", ".join(parts)


def answer_reserve(n_ctx: int, max_tokens: int | None) -> int:
    """Tokens kept free for the answer when fitting a prompt: the requested max_tokens
    (at most half the context), or a quarter of the context when none was asked."""
    if max_tokens is None or max_tokens < 0:
        return max(1, n_ctx // 4)
    return max(1, min(max_tokens, n_ctx // 2))


def fit_chat(vocab: Vocab, messages: list[dict[str, str]], n_ctx: int, reserve: int) -> Prompt:
    """Render and tokenize a chat so it fits ``n_ctx - reserve`` tokens.

    Keeps every leading system message and the newest turns; drops the oldest other
    messages (a kept history never starts with an assistant turn), and if the newest
    message alone is still too long, cuts its beginning. Raises PromptTooLongError when
    even that cannot fit (the system messages alone are too long).
    """
    budget = n_ctx - reserve
    n_sys = 0
    while n_sys < len(messages) and messages[n_sys]["role"] == "system":
        n_sys += 1
    system, rest = list(messages[:n_sys]), list(messages[n_sys:])
    dropped = trimmed = 0
    while True:
        toks = vocab.tokenize(vocab.render_chat(system + rest))
        if len(toks) <= budget:
            return Prompt(toks, n_ctx, dropped, trimmed)
        if len(rest) > 1:
            rest.pop(0)
            dropped += 1
            while len(rest) > 1 and rest[0]["role"] != "user":
                rest.pop(0)
                dropped += 1
            continue
        content = rest[0]["content"] if rest else ""
        ctoks = vocab.tokenize(content, add_bos=False)
        over = len(toks) - budget
        if not rest or over >= len(ctoks):
            sys_len = len(vocab.tokenize(vocab.render_chat(system + [{"role": "user", "content": ""}])))
            raise PromptTooLongError(
                f"the prompt cannot fit the context: the system messages and chat template alone take "
                f"{sys_len} tokens, the context per slot is {n_ctx} tokens with {reserve} kept for the answer")
        cut = over + 4  # a little slack: re-tokenizing the tail can merge differently
        rest[0] = {**rest[0], "content": vocab.detokenize(ctoks[cut:])}
        trimmed += cut


def fit_tokens(vocab: Vocab, tokens: list[int], n_ctx: int, reserve: int) -> Prompt:
    """Fit a raw token prompt into ``n_ctx - reserve`` by dropping its oldest tokens (a
    leading BOS is kept). Raises PromptTooLongError when nothing would remain."""
    budget = n_ctx - reserve
    if len(tokens) <= budget:
        return Prompt(list(tokens), n_ctx)
    head = [tokens[0]] if tokens and tokens[0] == vocab.bos else []
    keep = budget - len(head)
    if keep <= 0:
        raise PromptTooLongError(f"the context per slot ({n_ctx} tokens) leaves no room for the prompt")
    return Prompt(head + list(tokens[-keep:]), n_ctx, 0, len(tokens) - len(head) - keep)


@dataclass
class Sampling:
    """Sampling parameters (llama.cpp names). temperature 0 = greedy."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None


@dataclass
class Job:
    """One generation request for a slot.

    max_new: token limit after clamping to the context (0 = produce nothing);
    stop: strings that end the answer (not included in it).
    """

    prompt: Prompt
    sampling: Sampling
    max_new: int
    stop: list[str] = field(default_factory=list)
    requested_max: int | None = None
    kind: str = "completion"


@dataclass
class Result:
    """What a slot produced. Durations in seconds; finish: "stop", "length" or "cancelled"."""

    text: str
    tokens: list[int]
    finish: str
    prompt_tokens: int
    prompt_seconds: float
    eval_seconds: float
    load_seconds: float = 0.0
    queue_seconds: float = 0.0
    slot: int = -1


def clamp_max_new(prompt_len: int, n_ctx: int, requested: int | None) -> int:
    """Tokens the answer may have: ``requested`` (None = no limit) clamped to what is
    left of the context after the prompt."""
    room = max(0, n_ctx - prompt_len)
    return room if requested is None else max(0, min(requested, room))


def _split_utf8(buf: bytes) -> tuple[str, bytes]:
    """Decode the longest prefix of ``buf`` that is complete UTF-8; return it and the
    incomplete tail (at most 3 bytes)."""
    for cut in range(len(buf), max(len(buf) - 4, -1), -1):
        try:
            return buf[:cut].decode("utf-8"), buf[cut:]
        except UnicodeDecodeError:
            continue
    return buf.decode("utf-8", errors="replace"), b""


def _held(text: str, stops: list[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of a stop string."""
    best = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                best = max(best, k)
                break
    return best


def generate(llama: Any, vocab: Vocab, job: Job, cancel: threading.Event,
             on_text: Callable[[str], None] | None = None) -> Result:
    """Run ``job`` on a loaded ``llama_cpp.Llama`` (blocking; call from a worker thread).

    Streams text through ``on_text`` as it becomes final (complete UTF-8, not a possible
    start of a stop string). Stops at an end-of-generation token, a stop string,
    ``job.max_new`` tokens, or when ``cancel`` is set (finish "cancelled"). The slot's KV
    cache keeps the prompt prefix for the next request (llama_cpp's prefix reuse).
    """
    import random

    t0 = time.perf_counter()
    s = job.sampling
    if job.max_new <= 0:
        return Result("", [], "length", len(job.prompt.tokens), 0.0, 0.0)
    llama.set_seed(s.seed if s.seed is not None else random.getrandbits(32))
    gen = llama.generate(job.prompt.tokens, temp=s.temperature, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p,
                         repeat_penalty=s.repeat_penalty, presence_penalty=s.presence_penalty,
                         frequency_penalty=s.frequency_penalty, reset=True)
    out: list[int] = []
    raw = b""
    text = ""
    sent = 0
    finish = "length"
    stop_hit = False
    t_first = None
    try:
        for tok in gen:
            if t_first is None:
                t_first = time.perf_counter()
            if cancel.is_set():
                finish = "cancelled"
                break
            if vocab.is_eog(tok):
                finish = "stop"
                break
            out.append(tok)
            raw += vocab.piece(tok)
            new, raw = _split_utf8(raw)
            text += new
            if job.stop and new:
                search_from = max(0, len(text) - len(new) - max(len(x) for x in job.stop))
                hits = [i for i in (text.find(x, search_from) for x in job.stop) if i >= 0]
                if hits:
                    text = text[:min(hits)]
                    finish, stop_hit = "stop", True
                    break
            upto = len(text) - _held(text, job.stop)
            if on_text and upto > sent:
                on_text(text[sent:upto])
                sent = upto
            if len(out) >= job.max_new:
                finish = "length"
                break
    finally:
        gen.close()
    if not stop_hit:
        text += raw.decode("utf-8", errors="replace")
    if on_text and len(text) > sent and finish != "cancelled":
        on_text(text[sent:])
    t_end = time.perf_counter()
    t_first = t_first or t_end
    return Result(text, out, finish, len(job.prompt.tokens), t_first - t0, t_end - t_first)
