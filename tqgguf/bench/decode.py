"""Decoding on one context with llama.cpp's low-level API, shared by llama-bench's tests
(:class:`Decoder`) and the batched table (:class:`SeqBatch`): random token ids made
before the timed region, batches over buffers we own, and the model facts a row carries.
"""
from __future__ import annotations

import ctypes
import random

from ..shapes import SPEED_ONLY_KEY


class Decoder:
    """Token decoding on one context with the low-level API; what it counts is checked."""

    def __init__(self, ctx, vocab_n: int, add_bos: bool, bos: int, seed: int) -> None:
        import llama_cpp

        self.lc = llama_cpp
        self.ctx = ctx
        self.n_vocab = vocab_n
        self.add_bos = add_bos
        self.bos = bos
        self.rng = random.Random(seed)
        self.mem = llama_cpp.llama_get_memory(ctx)

    def _decode(self, batch) -> None:
        res = self.lc.llama_decode(self.ctx, batch)
        if res != 0:
            raise RuntimeError(f"llama_decode failed (returned {res})")

    def pos_max(self, seq: int = 0) -> int:
        return self.lc.llama_memory_seq_pos_max(self.mem, seq)

    def clear(self) -> None:
        self.lc.llama_memory_clear(self.mem, False)

    def tokens(self, n: int, *, first_bos: bool = True):
        """n random token ids as a ctypes array, the first BOS when the vocabulary adds it
        (llama-bench's choice), made before the timed region."""
        toks = (ctypes.c_int32 * n)(*[self.rng.randrange(self.n_vocab) for _ in range(n)])
        if first_bos and self.add_bos and n:
            toks[0] = self.bos
        return toks

    def prompt(self, toks, n_batch: int) -> int:
        """llama-bench's prompt run: the tokens ``toks`` (from :meth:`tokens`) decoded after
        what seq 0 holds, n_batch at a time (positions follow seq 0, the last token of each
        batch outputs), one synchronize at the end. Returns the tokens decoded."""
        n_prompt, base, done = len(toks), ctypes.addressof(toks), 0
        while done < n_prompt:
            n = min(n_prompt - done, n_batch)
            self._decode(self.lc.llama_batch_get_one(ctypes.cast(base + 4 * done, ctypes.POINTER(ctypes.c_int32)), n))
            done += n
        self.lc.llama_synchronize(self.ctx)
        return done

    def gen(self, toks) -> int:
        """llama-bench's generation run: one decode per token of ``toks`` (from
        :meth:`tokens`: BOS first when the vocabulary adds it, then random ids) after what
        seq 0 holds, synchronizing after each. Returns the tokens decoded."""
        tok = ctypes.c_int32()
        ptr = ctypes.pointer(tok)
        for t in toks:
            tok.value = t
            self._decode(self.lc.llama_batch_get_one(ptr, 1))
            self.lc.llama_synchronize(self.ctx)
        return len(toks)


def model_facts(engine) -> dict:
    """llama-bench's model fields of a row for an open model (tqgguf.runtime.Engine):
    model_type (llama.cpp's description), model_size (bytes), model_n_params, backends
    (tqgguf.engine.bench_backend), and speed_only = True for a random-weight shape file."""
    import llama_cpp

    from ..engine import bench_backend

    m = engine.llama.model
    buf = ctypes.create_string_buffer(256)
    llama_cpp.llama_model_desc(m, buf, ctypes.sizeof(buf))
    facts = {"model_type": buf.value.decode(), "model_size": int(llama_cpp.llama_model_size(m)),
             "model_n_params": int(llama_cpp.llama_model_n_params(m)), "backends": bench_backend()}
    n = llama_cpp.llama_model_meta_val_str(m, SPEED_ONLY_KEY.encode(), buf, ctypes.sizeof(buf))
    if n >= 0 and buf.value.decode().lower() == "true":  # a tqgguf.shapes file: random weights
        facts["speed_only"] = True
    return facts


def vocab(engine) -> tuple[int, bool, int]:
    """The open model's vocabulary: (number of tokens, whether it adds BOS, the BOS id)."""
    import llama_cpp

    v = llama_cpp.llama_model_get_vocab(engine.llama.model)
    return (llama_cpp.llama_vocab_n_tokens(v), bool(llama_cpp.llama_vocab_get_add_bos(v)),
            llama_cpp.llama_vocab_bos(v))


class SeqBatch:
    """A llama_batch over buffers we own, for many sequences (batched bench)."""

    def __init__(self, capacity: int) -> None:
        import llama_cpp

        self.lc = llama_cpp
        self.token = (ctypes.c_int32 * capacity)()
        self.pos = (ctypes.c_int32 * capacity)()
        self.n_seq_id = (ctypes.c_int32 * capacity)(*([1] * capacity))
        self.seq_vals = (ctypes.c_int32 * capacity)()
        base = ctypes.addressof(self.seq_vals)  # entry i's seq_id array (of one) is seq_vals[i]
        self.seq_addr = (ctypes.c_size_t * capacity)(*range(base, base + 4 * capacity, 4))
        self.logits = (ctypes.c_int8 * capacity)()
        self.n = 0

    def fill(self, tokens: list[int], pos: list[int], seq: list[int], out: list[int]) -> None:
        n = len(tokens)
        self.token[:n], self.pos[:n], self.seq_vals[:n], self.logits[:n] = tokens, pos, seq, out
        self.n = n

    def view(self, off: int, n: int):
        """llama_batch of entries [off, off + n)."""
        def at(arr, typ):
            return ctypes.cast(ctypes.addressof(arr) + ctypes.sizeof(typ) * off, ctypes.POINTER(typ))
        return self.lc.llama_batch(n_tokens=n, token=at(self.token, ctypes.c_int32), embd=None,
                                   pos=at(self.pos, ctypes.c_int32), n_seq_id=at(self.n_seq_id, ctypes.c_int32),
                                   seq_id=at(self.seq_addr, ctypes.POINTER(ctypes.c_int32)),
                                   logits=at(self.logits, ctypes.c_int8))

