#!/usr/bin/env python3
"""Load generator for an OpenAI-compatible server: N concurrent clients x R requests of M tokens.

Sends ``POST {base}/v1/completions`` (or ``/v1/chat/completions`` with --chat) from N
asyncio clients at once, each a fixed prompt plus its client number, and prints the
aggregate generation rate: completion tokens of every request / wall time from the first
request sent to the last answer received (t/s), with the per-request latency spread.
Works against llama-server directly, ``tqgguf serve`` (either server), or any
OpenAI-compatible endpoint. Example:

    python scripts/serve_load.py http://127.0.0.1:11434 --clients 32 --tokens 128

--json prints one JSON object instead (for scripts). Exit status 1 when any request
fails (the errors are printed), 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

import httpx

PROMPT = ("Write a long story about a lighthouse keeper who finds a message in a bottle. "
          "Story number {i}:")


async def one(client: httpx.AsyncClient, args, i: int) -> tuple[int, float]:
    """One request; returns (completion tokens, seconds)."""
    body: dict = {"max_tokens": args.tokens, "temperature": args.temperature}
    if args.model:
        body["model"] = args.model
    if args.ignore_eos:
        body["ignore_eos"] = True  # llama-server's field: every request generates exactly --tokens
    if args.chat:
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": PROMPT.format(i=i)}]
    else:
        path = "/v1/completions"
        body["prompt"] = PROMPT.format(i=i)
    t0 = time.perf_counter()
    r = await client.post(path, json=body)
    dt = time.perf_counter() - t0
    if r.status_code != 200:
        raise RuntimeError(f"HTTP {r.status_code} from {path}: {r.text[:300]}")
    usage = r.json().get("usage") or {}
    n = usage.get("completion_tokens")
    if n is None:
        raise RuntimeError(f"no usage.completion_tokens in the answer: {r.text[:300]}")
    return int(n), dt


async def run(args) -> dict:
    limits = httpx.Limits(max_connections=args.clients + 4, max_keepalive_connections=args.clients + 4)
    async with httpx.AsyncClient(base_url=args.url.rstrip("/"), timeout=args.timeout, limits=limits) as client:
        if args.warmup:
            await one(client, argparse.Namespace(**{**vars(args), "tokens": 4}), -1)

        async def worker(c: int) -> list[tuple[int, float]]:
            return [await one(client, args, c * args.requests + k) for k in range(args.requests)]

        t0 = time.perf_counter()
        results = await asyncio.gather(*(worker(c) for c in range(args.clients)), return_exceptions=True)
        wall = time.perf_counter() - t0
    errors = [r for r in results if isinstance(r, BaseException)]
    done = [x for r in results if not isinstance(r, BaseException) for x in r]
    tokens = sum(n for n, _ in done)
    lat = sorted(d for _, d in done)
    return {"url": args.url, "clients": args.clients, "requests_per_client": args.requests,
            "max_tokens": args.tokens, "requests_ok": len(done), "errors": [repr(e) for e in errors],
            "completion_tokens": tokens, "wall_s": round(wall, 3),
            "aggregate_tps": round(tokens / wall, 2) if wall > 0 else 0.0,
            "latency_s": {"median": round(statistics.median(lat), 3) if lat else None,
                          "max": round(lat[-1], 3) if lat else None}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("url", help="base URL, e.g. http://127.0.0.1:11434 (no /v1)")
    p.add_argument("-n", "--clients", type=int, default=8, help="concurrent clients (default 8)")
    p.add_argument("-m", "--tokens", type=int, default=128, help="max_tokens per request (default 128)")
    p.add_argument("-r", "--requests", type=int, default=1, help="requests per client, one after another (default 1)")
    p.add_argument("--model", default=None, help="model field (default: none, the server's default model)")
    p.add_argument("--chat", action="store_true", help="use /v1/chat/completions instead of /v1/completions")
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="let requests stop at end-of-text (then fewer tokens than --tokens may come back)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default 600)")
    p.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the 4-token warm-up request")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    if args.clients < 1 or args.tokens < 1 or args.requests < 1:
        p.error("--clients, --tokens and --requests must be at least 1")
    try:
        res = asyncio.run(run(args))
    except (httpx.HTTPError, RuntimeError, OSError) as e:
        print(f"error: {args.url}: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(res))
    else:
        print(f"{res['url']}: {res['clients']} clients x {res['requests_per_client']} request(s) x "
              f"{res['max_tokens']} tokens: {res['completion_tokens']} tokens in {res['wall_s']:.2f} s = "
              f"{res['aggregate_tps']:.2f} t/s aggregate (latency median {res['latency_s']['median']} s, "
              f"max {res['latency_s']['max']} s)")
    for e in res["errors"]:
        print(f"error: {e}", file=sys.stderr)
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
