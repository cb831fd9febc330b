"""Issue-14 tables from the result files (run after run_eval.sh / run_mix.sh; prints markdown):

    python results/kv-plan/tables.py > results/kv-plan/tables.md

Sources: this directory's sweeps (<model>/results.jsonl, PPL + KLD on this machine), the
uniform maps (results/grid/*_llama-perplexity_grid.tsv, llama-perplexity on the GPU
machine's 16-core CPU; results/sweep-smollm2 on this machine; results/k-center/device/
qwen_full.tsv for Qwen with --k-center full) and the mix plan files (mix/<model>-<bits>.json,
predicted KLD and bits/value). bits/value of a uniform K/V pair = (bits K + bits V) / 2 (head
dims of K and V are equal in the three models).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BITS = {"f16": 16.0, "q8_0": 8.5, "q4_0": 4.5, "turbo4": 4.25, "turbo3": 3.25}
MODELS = {"smollm2": "SmolLM2-135M", "gemma3": "Gemma-3-270M", "qwen": "Qwen2.5-Coder-0.5B (--k-center full)"}
MAPS = {"smollm2": ROOT / "results/grid/smollm2-135m_llama-perplexity_grid.tsv",
        "gemma3": ROOT / "results/grid/gemma3-270m_llama-perplexity_grid.tsv",
        "qwen": ROOT / "results/k-center/device/qwen_full.tsv"}
F16_PPL = {"smollm2": 28.7149, "gemma3": 19.0012, "qwen": 38.1012}  # the maps' f16/f16 (docs/RESULTS.md, K_CENTERING.md)


def rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def uniform_map(name: str) -> list[dict]:
    """Rotation-on (or centered) uniform rows of the model's map: ctk, ctv, bits, ppl, kld."""
    out = []
    with open(MAPS[name]) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            if r.get("rot", "on") != "on":
                continue
            out.append({"ctk": r["ctk"], "ctv": r["ctv"], "bits": (BITS[r["ctk"]] + BITS[r["ctv"]]) / 2,
                        "ppl": float(r["ppl"]), "kld": float(r["kld"])})
    return out


def fmt_row(label: str, ppl: float, f16: float, kld: float | None, bits: float, src: str) -> str:
    k = "—" if kld is None else f"{kld:.4f}"
    return f"| {label} | {ppl:.4f} | {100 * (ppl / f16 - 1):+.1f}% | {k} | {bits:.2f} | {src} |"


#: further sweep dirs of a model (a plan evaluated in parallel into its own dir, same cached baseline)
EXTRA = {"gemma3": ["gemma3-mix425"]}


def ours(name: str, sub: str = "") -> dict[str, dict]:
    dirs = [sub] if sub else [name] + EXTRA.get(name, [])
    return {r["key"]: r for d in dirs for r in rows(HERE / d / "results.jsonl") if r.get("status", "ok") == "ok"}


def chk(plan: dict) -> str:
    m = plan.get("measured_calibration_kld")
    return "—" if m is None else f"{m:.4f}"


def kept(plan: dict) -> str:
    """Which candidate the calibration check kept (plan files from the checked choice) and
    by how much it measured below the runner-up."""
    if "kept" not in plan:
        return "— (made before the check)"
    cands = {c["label"]: c for c in plan["candidates"]}
    others = [c for c in plan["candidates"] if c["label"] != plan["kept"]]
    if not others:
        return plan["kept"]
    ru = min(others, key=lambda c: c["measured_calibration_kld"])
    m = cands[plan["kept"]]["measured_calibration_kld"]
    r = ru["measured_calibration_kld"]
    return f"{plan['kept']}, {100 * (r - m) / r:.1f}% below the runner-up {ru['label']} ({r:.4f})"


def main() -> None:
    print("## --kv-boundary 2 against uniform turbo3 and turbo4 (WikiText-2 test, n_ctx 512, 20 chunks)\n")
    print("| model, K/V | PPL | vs f16 | mean KLD | bits/value | source |")
    print("|---|---|---|---|---|---|")
    for name, title in MODELS.items():
        mine = ours(name)
        base = next((r for k, r in mine.items() if k.startswith("f16/f16/rot=n/a") and "kc=" not in k), None)
        umap = {(u["ctk"], u["ctv"]): u for u in uniform_map(name)}
        f16 = base["ppl"] if base else F16_PPL[name]
        if base:
            print(fmt_row(f"{title} f16/f16", base["ppl"], f16, 0.0, 16, "this machine"))
        for t in ("turbo3", "turbo4"):
            here = next((r for r in mine.values() if r["ctk"] == r["ctv"] == t and not r.get("kv_plan")), None)
            if here:
                print(fmt_row(f"{title} {t}/{t}", here["ppl"], f16, here["kld_mean"], here["bits_per_value"], "this machine"))
            elif (t, t) in umap:
                u = umap[(t, t)]
                print(fmt_row(f"{title} {t}/{t}", u["ppl"], F16_PPL[name], u["kld"], u["bits"], f"map ({MAPS[name].name})"))
        for r in mine.values():
            if r.get("kv_plan", "").startswith("--kv-boundary"):
                print(fmt_row(f"**{title} {r['ctk']}/{r['ctv']} {r['kv_plan']}**", r["ppl"], f16, r["kld_mean"],
                              r["bits_per_value"], "this machine"))
    print("\n## Gemma-3-270M: sliding-window layers at f16 (--kv-swa f16)\n")
    print("bits/value: per cached token with every layer holding n_ctx cells (llama.cpp's default swa_full); "
          "KV MiB at n_ctx 32768 with window-sized caches is in gemma3-kv-mib-32768.txt.\n")
    print("| n_ctx, chunks | K/V | layer plan | PPL | vs f16 | mean KLD | bits/value |")
    print("|---|---|---|---|---|---|---|")
    for sub in ("gemma3", "gemma3-c4096"):
        mine = ours("gemma3", sub)
        base = mine.get("f16/f16/rot=n/a")
        if sub == "gemma3":  # the uniform rows at n_ctx 512: from the map
            for u in uniform_map("gemma3"):
                if u["ctk"] == u["ctv"] in ("turbo3", "turbo4"):
                    print(f"| 512, 20 (map) | {u['ctk']}/{u['ctv']} | — | {u['ppl']:.4f} | "
                          f"{100 * (u['ppl'] / F16_PPL['gemma3'] - 1):+.1f}% | {u['kld']:.4f} | {u['bits']:.2f} |")
        for r in mine.values():
            if r.get("kv_plan", "").startswith("--kv-boundary") or "--kv-plan" in r.get("kv_plan", ""):
                continue
            f16 = base["ppl"] if base else F16_PPL["gemma3"]
            print(f"| {r['n_ctx']}, {r['chunks']} | {r['ctk']}/{r['ctv']} | {r.get('kv_plan') or '—'} | {r['ppl']:.4f} | "
                  f"{100 * (r['ppl'] / f16 - 1):+.1f}% | {r['kld_mean']:.4f} | {r['bits_per_value']:.2f} |")
    print("\n## tqgguf mix plans on WikiText-2 (calibration: the built-in pydoc corpus) against the uniform map\n")
    print("| model | budget | plan bits/value | predicted KLD | checked on calibration | kept on calibration "
          "| measured KLD (WikiText-2) | PPL | vs f16 | uniform configs with >= bits and lower KLD | best uniform with <= bits |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, title in MODELS.items():
        mine = ours(name)
        base = mine.get("f16/f16/rot=n/a")
        umap = uniform_map(name)
        for b in ("3.5", "4.25"):
            pf = HERE / "mix" / f"{name}-{b}.json"
            if not pf.exists():
                print(f"| {title} | {b} | not measured | | | | | | | | |")
                continue
            plan = json.loads(pf.read_text())
            r = next((r for r in mine.values() if str(pf.name) in r.get("kv_plan", "")), None)
            if r is None:
                print(f"| {title} | {b} | {plan['bits_per_value']:.3f} | {plan['predicted_kld']:.4f} | {chk(plan)} | "
                      f"{kept(plan)} | not measured | | | | |")
                continue
            bits, kld = r["bits_per_value"], r["kld_mean"]
            better = sorted((u for u in umap if u["bits"] >= bits - 1e-9 and u["kld"] < kld), key=lambda u: u["bits"])
            below = [u for u in umap if u["bits"] <= bits + 1e-9]
            best_below = min(below, key=lambda u: u["kld"]) if below else None
            n_ge = sum(u["bits"] >= bits - 1e-9 for u in umap)
            bl = f"{len(better)} of {n_ge}" + (f"; cheapest {better[0]['ctk']}/{better[0]['ctv']} ({better[0]['bits']:.2f} b, "
                                              f"{better[0]['kld']:.4f})" if better else "")
            bb = f"{best_below['ctk']}/{best_below['ctv']} ({best_below['bits']:.2f} b, {best_below['kld']:.4f})" \
                if best_below else "—"
            f16 = base["ppl"] if base else F16_PPL[name]
            print(f"| {title} | {b} | {bits:.3f} | {plan['predicted_kld']:.4f} | {chk(plan)} | {kept(plan)} | {kld:.4f} | "
                  f"{r['ppl']:.4f} | "
                  f"{100 * (r['ppl'] / f16 - 1):+.1f}% | {bl} | {bb} |")
    print("\nPlans:\n")
    for name in MODELS:
        for b in ("3.5", "4.25"):
            pf = HERE / "mix" / f"{name}-{b}.json"
            if pf.exists():
                print(f"- `{pf.relative_to(ROOT)}`: `{json.loads(pf.read_text())['plan']}`")


if __name__ == "__main__":
    main()
