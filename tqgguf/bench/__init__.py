"""Speed of K/V cache types through the engine: llama-bench's and llama-batched-bench's
measurements, run in-process on the patched ``llama_cpp``.

Method (read from the pinned llama.cpp, ``tools/llama-bench/llama-bench.cpp`` and
``tools/batched-bench/batched-bench.cpp``; the code here is ours):

- **Tests** (llama-bench): comma lists expand to every combination in llama-bench's order —
  K type, V type, flash attention, depth, then the pp tests (``-p``), then the tg tests
  (``-n``). A test is ``ppP`` (decode P prompt tokens in batches of n_batch, synchronize
  once at the end), or ``tgN`` (N single-token decodes, synchronizing after each), both
  optionally ``@ dD``: D tokens are prefilled untimed before each repetition. Tokens are
  random ids (the first one BOS when the vocabulary adds it), as llama-bench's.
- Each test gets its own context of n_ctx = P + N + D cells (n_batch, n_ubatch as given,
  ``swa_full`` off) on the model loaded once per K/V configuration. Warmup (unless off):
  one full pp run, or one generated token. Each repetition clears the KV memory, restores
  the depth prefix (prefilled once per configuration and depth, then restored from the
  saved sequence state, as llama-bench does), and times the test with a monotonic clock.
  t/s of a repetition = tokens / seconds; the reported value is the mean ± sample standard
  deviation over repetitions of those rates (llama-bench's ``avg_ts``/``stddev_ts``).
- **Batched** (llama-batched-bench, default mode: prompt not shared, generation
  interleaved): one context with n_seq_max = max(npl) and n_ctx = max(pl × (pp + tg)),
  non-unified KV; warmup of 16 tokens; per (pp, tg, pl): clear the memory, decode pl
  prompts of pp tokens (in n_batch slices; one synchronize), then tg steps of pl tokens
  (one per sequence, synchronizing after each). S_PP = pl·pp / T_PP, S_TG = pl·tg / T_TG,
  S = (pl·pp + pl·tg) / (T_PP + T_TG).

Results go to ``results.jsonl`` in the output directory as each test finishes (field names
as llama-bench's / llama-batched-bench's jsonl); a rerun with the same settings skips the
tests already there.

Modules, one concern each:

- :mod:`tqgguf.bench.spec` — what a run is: the ``-p/-n/-d/-ctk/-ctv/-fa`` lists and their
  expansion (:class:`Test`), :class:`BatchedSpec`, :class:`BenchSpec`, :func:`validate`, what
  makes two results the same measurement (their keys) and the ``results.jsonl`` file;
- :mod:`tqgguf.bench.runner` — :func:`run_bench`: llama-bench's tests, configuration by
  configuration, then the batched table; resume;
- :mod:`tqgguf.bench.batched` — llama-batched-bench's loop (one context, many sequences);
- :mod:`tqgguf.bench.decode` — decoding with llama.cpp's low-level API, shared by both: random
  tokens, the prompt and generation runs, a batch over many sequences, the model's facts;
- :mod:`tqgguf.bench.roofline` — bytes read per generated token (KV, weights), the device's
  bandwidth (``bandwidth.json``) and the share of it a tg row reaches;
- :mod:`tqgguf.bench.report` — the markdown tables, csv, jsonl and the plot.
"""
