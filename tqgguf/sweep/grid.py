"""Sweep grids: llama-bench-style comma lists expanded to every K × V × rotation × K-center
combination."""
from __future__ import annotations

from dataclasses import dataclass

from ..cachetypes import check_cache_type, is_quantized
from ..values import parse_k_center
from ..kvplan import plan_label

DEFAULT_K = ("f16", "q8_0", "q4_0", "turbo4", "turbo3")
DEFAULT_V = ("q8_0", "q4_0", "turbo4", "turbo3")
ROT_VALUES = {"on": True, "off": False}


@dataclass(frozen=True, order=True)
class Config:
    """One K/V cache configuration. ``rot`` is None when neither cache is quantized
    (rotation never applies then, so on/off are the same run). ``kc`` is the K centering
    (a canonical ``--k-center`` value, see tqgguf.kcenter); always "off" for an
    unquantized K cache, where centering cannot change the quantization."""

    ctk: str
    ctv: str
    rot: bool | None
    kc: str = "off"
    boundary: str = ""  # layer plan (tqgguf.kvplan): --kv-boundary N:K/V, --kv-swa K/V, --kv-plan MAP|FILE
    swa: str = ""
    kvmap: str = ""

    @property
    def plan_label(self) -> str:
        """The layer plan as flags ("" = none)."""
        return plan_label((self.boundary, self.swa, self.kvmap))

    @property
    def key(self) -> str:
        r = "n/a" if self.rot is None else ("on" if self.rot else "off")
        plan = "".join(f"/{n}={v}" for n, v in (("boundary", self.boundary), ("swa", self.swa), ("plan", self.kvmap)) if v)
        return f"{self.ctk}/{self.ctv}/rot={r}" + (f"/kc={self.kc}" if self.kc != "off" else "") + plan

    @property
    def rot_label(self) -> str:
        return "n/a" if self.rot is None else ("on" if self.rot else "off")


BASELINE = Config("f16", "f16", None)


def parse_list(value: str, what: str) -> list[str]:
    """Split a comma list; raise ValueError for an empty list or an empty item."""
    items = [s.strip() for s in str(value).split(",")]
    if not value or not str(value).strip() or any(not s for s in items):
        raise ValueError(f"{what}: empty list or empty item in {value!r}; give comma-separated names")
    return items


def parse_types(value: str, what: str) -> list[str]:
    """Comma list of cache types; CacheTypeError names the unknown one and lists valid names."""
    out = []
    for item in parse_list(value, what):
        out.append(check_cache_type(item, f"cache type in {what}"))
    return list(dict.fromkeys(out))


def parse_rot(value: str) -> list[bool]:
    """'on', 'off' or 'on,off' -> [True], [False], [True, False]."""
    out = []
    for item in parse_list(value, "--rot"):
        if item.lower() not in ROT_VALUES:
            raise ValueError(f"--rot: {item!r} is not allowed; use on, off or on,off")
        out.append(ROT_VALUES[item.lower()])
    return list(dict.fromkeys(out))


def parse_k_centers(value: str) -> list[str]:
    """Comma list of ``--k-center`` values -> canonical names (KCenterError, a ValueError,
    for an unknown one)."""
    return list(dict.fromkeys(str(parse_k_center(item)) for item in parse_list(value, "--k-center")))


def expand(ctk: list[str], ctv: list[str], rot: list[bool], kc: list[str] = ("off",), *,
           plans: list[tuple[str, str, str]] = (("", "", ""),), with_baseline: bool = True) -> list[Config]:
    """Every K × V × rotation × K-center × layer plan combination (llama-bench order),
    f16/f16 baseline first. K-center values collapse to "off" for an unquantized K, except
    that f16/f16 is kept with each K-center value: its KLD against the baseline measures
    that centering leaves unquantized attention unchanged. ``plans``: (boundary, swa, map)
    from :func:`parse_plan_axes`."""
    seen: dict[str, Config] = {}
    if with_baseline:
        seen[BASELINE.key] = BASELINE
    for k in ctk:
        for v in ctv:
            quant = is_quantized(k) or is_quantized(v)
            for r in rot:
                for c in kc:
                    for b, s, m in plans:
                        planned = bool(b or s or m)
                        keep = is_quantized(k) or (k, v) == ("f16", "f16") or planned
                        cfg = Config(k, v, r if quant or planned else None, c if keep else "off", b, s, m)
                        seen.setdefault(cfg.key, cfg)
    return list(seen.values())
