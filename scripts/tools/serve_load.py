#!/usr/bin/env python3
"""Load generator for an OpenAI-compatible server: N concurrent clients x R requests of M tokens.

Each of N clients has its own HTTP connection (one aiohttp session, one kept-alive
connection) and sends ``POST {base}/v1/completions`` (or ``/v1/chat/completions`` with
--chat): a fixed prompt plus its request number, ``max_tokens`` M, greedy, ``ignore_eos``
so that every request generates exactly M tokens. Before the measured runs every client
sends one 4-token warm-up request, all at once, so the connections (the client's, and a
front's own connections to the server behind it) are open and the server's slots have run
once: both sides of a direct-vs-front comparison are measured warm.

A run: all N clients start together, each sends its R requests one after another. The
aggregate generation rate of a run is the completion tokens of every request / wall time
from the first request sent to the last answer received (t/s). ``--repeat K`` does K runs
on the same connections and reports each run and the median (the JSON's top-level rate,
wall time and latencies are the median run's).

``--cpu-pid PID`` also reads the CPU time (user + system, ``/proc/PID/stat``; Linux) of
that process over each run and reports it per request: for ``tqgguf serve`` that is what
its front costs (its llama-server child is a separate process and is not counted). Works
against llama-server directly, ``tqgguf serve``, or any OpenAI-compatible endpoint:

    python scripts/tools/serve_load.py http://127.0.0.1:11434 --clients 32 --tokens 128 --repeat 5

--json prints one JSON object instead (for scripts). Exit status 1 when any request
fails (the errors are printed), 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time

import aiohttp

PROMPT = ("Write a long story about a lighthouse keeper who finds a message in a bottle. "
          "Story number {i}:")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (fields 14 and 15 of
    ``/proc/PID/stat``, in clock ticks; proc(5)). Raises OSError when it is gone."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": field 3 onwards
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def request_body(args, i: int, tokens: int) -> tuple[str, dict]:
    body: dict = {"max_tokens": tokens, "temperature": args.temperature}
    if args.model:
        body["model"] = args.model
    if args.ignore_eos:
        body["ignore_eos"] = True  # llama-server's field: every request generates exactly `tokens`
    if args.chat:
        body["messages"] = [{"role": "user", "content": PROMPT.format(i=i)}]
        return "/v1/chat/completions", body
    body["prompt"] = PROMPT.format(i=i)
    return "/v1/completions", body


async def one(session: aiohttp.ClientSession, args, i: int, tokens: int) -> tuple[int, float]:
    """One request; returns (completion tokens, seconds). RuntimeError on a non-200 answer."""
    path, body = request_body(args, i, tokens)
    t0 = time.perf_counter()
    async with session.post(path, json=body) as r:
        text = await r.text()
        dt = time.perf_counter() - t0
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status} from {path}: {text[:300]}")
    try:
        n = (json.loads(text).get("usage") or {}).get("completion_tokens")
    except ValueError:
        n = None
    if n is None:
        raise RuntimeError(f"no usage.completion_tokens in the answer: {text[:300]}")
    return int(n), dt


def summarize(results: list, wall: float) -> dict:
    errors = [r for r in results if isinstance(r, BaseException)]
    done = [x for r in results if not isinstance(r, BaseException) for x in r]
    tokens = sum(n for n, _ in done)
    lat = sorted(d for _, d in done)
    return {"requests_ok": len(done), "errors": [repr(e) for e in errors], "completion_tokens": tokens,
            "wall_s": round(wall, 3), "aggregate_tps": round(tokens / wall, 2) if wall > 0 else 0.0,
            "latency_s": {"median": round(statistics.median(lat), 3) if lat else None,
                          "max": round(lat[-1], 3) if lat else None}}


async def run(args) -> dict:
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    sessions = [aiohttp.ClientSession(base_url=args.url.rstrip("/"), timeout=timeout,
                                      connector=aiohttp.TCPConnector(limit=1, keepalive_timeout=60))
                for _ in range(args.clients)]
    runs: list[dict] = []
    try:
        if args.warmup:  # one short request per client connection, all at once
            await asyncio.gather(*(one(s, args, -1 - c, 4) for c, s in enumerate(sessions)))
        for k in range(args.repeat):
            async def worker(c: int) -> list[tuple[int, float]]:
                s = sessions[c]
                return [await one(s, args, (k * args.clients + c) * args.requests + j, args.tokens)
                        for j in range(args.requests)]

            cpu0 = cpu_seconds(args.cpu_pid) if args.cpu_pid else 0.0
            t0 = time.perf_counter()
            results = await asyncio.gather(*(worker(c) for c in range(args.clients)), return_exceptions=True)
            wall = time.perf_counter() - t0
            res = summarize(results, wall)
            if args.cpu_pid:
                cpu = cpu_seconds(args.cpu_pid) - cpu0
                res["server_cpu_s"] = round(cpu, 4)
                res["server_cpu_ms_per_request"] = round(1000 * cpu / max(args.clients * args.requests, 1), 3)
            runs.append(res)
            if not args.json:
                print(f"run {k + 1}/{args.repeat}: {line(res)}", flush=True)
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
    med = sorted(runs, key=lambda r: r["aggregate_tps"])[(len(runs) - 1) // 2]  # the median run (lower middle)
    out = {"url": args.url, "clients": args.clients, "requests_per_client": args.requests, "max_tokens": args.tokens,
           "repeat": args.repeat, **{k: v for k, v in med.items() if k != "errors"},
           "errors": [e for r in runs for e in r["errors"]],
           "aggregate_tps_runs": [r["aggregate_tps"] for r in runs],
           "aggregate_tps_median": round(statistics.median(r["aggregate_tps"] for r in runs), 2)}
    if args.cpu_pid:
        out["server_cpu_ms_per_request_median"] = round(
            statistics.median(r["server_cpu_ms_per_request"] for r in runs), 3)
    out["runs"] = runs
    return out


def line(r: dict) -> str:
    s = (f"{r['completion_tokens']} tokens in {r['wall_s']:.2f} s = {r['aggregate_tps']:.2f} t/s aggregate "
         f"(latency median {r['latency_s']['median']} s, max {r['latency_s']['max']} s)")
    if "server_cpu_ms_per_request" in r:
        s += f", server CPU {r['server_cpu_ms_per_request']:.2f} ms/request"
    return s


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("url", help="base URL, e.g. http://127.0.0.1:11434 (no /v1)")
    p.add_argument("-n", "--clients", type=int, default=8, help="concurrent clients (default 8)")
    p.add_argument("-m", "--tokens", type=int, default=128, help="max_tokens per request (default 128)")
    p.add_argument("-r", "--requests", type=int, default=1, help="requests per client, one after another (default 1)")
    p.add_argument("-k", "--repeat", type=int, default=1, help="measured runs; each is reported, and the median "
                                                                 "(default 1)")
    p.add_argument("--model", default=None, help="model field (default: none, the server's default model)")
    p.add_argument("--chat", action="store_true", help="use /v1/chat/completions instead of /v1/completions")
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="let requests stop at end-of-text (then fewer tokens than --tokens may come back)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default 600)")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="skip the 4-token warm-up request of each client")
    p.add_argument("--cpu-pid", type=int, default=None,
                   help="also report this process's CPU time per request over each run (Linux /proc)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    if args.clients < 1 or args.tokens < 1 or args.requests < 1 or args.repeat < 1:
        p.error("--clients, --tokens, --requests and --repeat must be at least 1")
    if args.cpu_pid is not None:
        try:
            cpu_seconds(args.cpu_pid)
        except (OSError, ValueError, IndexError) as e:
            p.error(f"--cpu-pid {args.cpu_pid}: cannot read its CPU time ({e})")
    try:
        res = asyncio.run(run(args))
    except (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError, OSError) as e:
        print(f"error: {args.url}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(res))
    else:
        print(f"{res['url']}: {res['clients']} clients x {res['requests_per_client']} request(s) x "
              f"{res['max_tokens']} tokens, median of {res['repeat']} run(s): {line(res)}")
        if res["repeat"] > 1:
            print(f"runs (t/s): {', '.join(f'{x:.2f}' for x in res['aggregate_tps_runs'])}")
    for e in res["errors"]:
        print(f"error: {e}", file=sys.stderr)
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
