#!/usr/bin/env python3
"""Draft acceptance of a speculative-decoding server: greedy chat requests, llama-server's counts.

Sends each prompt of a fixed list (or the lines of --prompts FILE) to ``POST
{base}/v1/chat/completions`` one after another, greedy (temperature 0), ``max_tokens`` M, and
sums what llama-server reports in each answer's ``timings``: ``draft_n`` (tokens the draft
model proposed) and ``draft_n_accepted`` (those the served model kept). Prints one line per
prompt and the total acceptance, e.g. for ``tqgguf serve MODEL -md DRAFT -ctkd turbo3 -ctvd
turbo3`` against the same with ``-ctkd f16 -ctvd f16``:

    python scripts/tools/draft_acceptance.py http://127.0.0.1:11434 -m 64

With --compare URL2 (a server of the same model without a draft), each answer is also
compared with URL2's: speculative decoding must not change a greedy answer. --json prints one
JSON object. Exit status 1 when a request fails or an answer differs, 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import json
import sys

import httpx

PROMPTS = [
    "List the days of the week, one per line.",
    "Count from 1 to 20, separated by commas.",
    "Write a short paragraph about the history of Paris.",
    "Explain what a hash table is in three sentences.",
    "Give me a recipe for pancakes.",
    "What are the planets of the solar system, in order from the sun?",
    "Write a Python function that reverses a string.",
    "Summarise the plot of Romeo and Juliet.",
]


def ask(client: httpx.Client, prompt: str, tokens: int) -> dict:
    """One greedy chat request; the answer's JSON (HTTPError on a failed request)."""
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": prompt}],
                                                   "max_tokens": tokens, "temperature": 0})
    r.raise_for_status()
    return r.json()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("url", help="base URL of the server, e.g. http://127.0.0.1:11434")
    ap.add_argument("-m", "--tokens", type=int, default=64, help="max_tokens per request (default 64)")
    ap.add_argument("--prompts", help="a text file, one prompt per line (default: 8 built-in prompts)")
    ap.add_argument("--compare", metavar="URL2", help="a server of the same model without a draft: answers must match")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args(argv)
    if a.tokens < 1:
        ap.error("--tokens must be at least 1")
    prompts = PROMPTS
    if a.prompts:
        with open(a.prompts, encoding="utf-8") as f:
            prompts = [ln.strip() for ln in f if ln.strip()]
    rows, failed = [], False
    with httpx.Client(base_url=a.url, timeout=600) as c, \
            httpx.Client(base_url=a.compare or a.url, timeout=600) as ref:
        for p in prompts:
            try:
                j = ask(c, p, a.tokens)
            except httpx.HTTPError as e:
                print(f"error: {p!r}: {e}", file=sys.stderr)
                failed = True
                continue
            t = j.get("timings") or {}
            row = {"prompt": p, "tokens": j["usage"]["completion_tokens"], "draft_n": t.get("draft_n", 0),
                   "draft_n_accepted": t.get("draft_n_accepted", 0)}
            if a.compare:
                other = ask(ref, p, a.tokens)["choices"][0]["message"]["content"]
                row["same_as_plain"] = other == j["choices"][0]["message"]["content"]
                failed = failed or not row["same_as_plain"]
            rows.append(row)
    n = sum(r["draft_n"] for r in rows)
    acc = sum(r["draft_n_accepted"] for r in rows)
    total = {"requests": len(rows), "tokens": sum(r["tokens"] for r in rows), "draft_n": n, "draft_n_accepted": acc,
             "acceptance": acc / n if n else None}
    if a.json:
        print(json.dumps({"rows": rows, "total": total}))
    else:
        for r in rows:
            rate = f"{r['draft_n_accepted'] / r['draft_n']:.0%}" if r["draft_n"] else "-"
            same = "" if "same_as_plain" not in r else ("  same as plain" if r["same_as_plain"] else "  DIFFERS")
            print(f"{r['draft_n_accepted']:5d} / {r['draft_n']:5d} accepted ({rate:>4}), {r['tokens']} tokens: "
                  f"{r['prompt'][:50]}{same}")
        rate = f"{total['acceptance']:.1%}" if n else "no drafts (is the server running a draft model?)"
        print(f"total: {acc} / {n} draft tokens accepted: {rate}, {total['tokens']} tokens in {len(rows)} requests")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
