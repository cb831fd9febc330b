"""``tqgguf serve``: a model behind OpenAI- and Ollama-compatible APIs (thin layer over tqgguf.server).

Flags left out fall back to ``TQGGUF_*``, then ``OLLAMA_*`` variables, then defaults
(``tqgguf env`` shows the result). Everything is validated before the model is loaded: a
bad flag or variable exits with status 2 and a message naming it, a taken port with 1.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import click

from ..config import setting_help
from .options import (cache_type_options, flash_attn_option, k_center_option, kv_plan_options, offload_options, offload_overrides,
                      resolve_offload, rotation_option)
from ..values import MAX_THREADS


def _echo_err(line: str) -> None:
    click.echo(line, err=True)


@click.command(name="serve")
@click.argument("model")
@cache_type_options()
@click.option("-c", "--ctx-size", "ctx", metavar="N", default=None,
              help="Context length in tokens, per slot [env TQGGUF_CONTEXT_LENGTH, OLLAMA_CONTEXT_LENGTH; "
                   "default 4096].")
@click.option("-np", "--parallel", "parallel", metavar="N", default=None,
              help="Parallel slots, batched together by llama-server, each with -c tokens of KV cache "
                   "[env TQGGUF_NUM_PARALLEL, OLLAMA_NUM_PARALLEL (0 = auto: 1, as Ollama); default 1].")
@click.option("--max-ctx", "max_ctx", metavar="N", default=None,
              help="Largest per-slot context a request's options.num_ctx may reload the model with "
                   "[env TQGGUF_MAX_CONTEXT_LENGTH; default 0 = the model's training context].")
@flash_attn_option()
@rotation_option()
@k_center_option()
@kv_plan_options()
@click.option("--host", metavar="HOST[:PORT]", default=None,
              help="Listen address: host, :port, host:port, http://host:port [env TQGGUF_HOST, OLLAMA_HOST; "
                   "default 127.0.0.1:11434].")
@click.option("--port", metavar="PORT", default=None, help="Listen port (overrides a port in --host).")
@click.option("--keep-alive", "keep_alive", metavar="DURATION", default=None,
              help="Idle time before the model unloads: 5m, 1h, 30s, 0, -1 = forever "
                   "[env TQGGUF_KEEP_ALIVE, OLLAMA_KEEP_ALIVE; default 5m].")
@offload_options()
@click.option("-t", "--threads", type=click.IntRange(1, MAX_THREADS), default=None,
              help="CPU threads of llama-server (default: its own, every core).")
@click.option("--alias", default=None, help="Model name clients use (default: the GGUF file name without .gguf).")
@click.option("-md", "--model-draft", "draft_model", metavar="MODEL", default=None,
              help="Draft model for speculative decoding (llama-server's -md): a GGUF path or a `tqgguf models list` "
                   "name sharing MODEL's vocabulary [env TQGGUF_DRAFT_MODEL].")
@click.option("-ctkd", "--cache-type-k-draft", "ctkd", metavar="TYPE", default=None,
              help=setting_help("cache_type_k_draft"))
@click.option("-ctvd", "--cache-type-v-draft", "ctvd", metavar="TYPE", default=None,
              help=setting_help("cache_type_v_draft"))
@click.option("--spec-draft-n-max", "--draft-max", "draft_max", metavar="N", default=None,
              help=setting_help("draft_max"))
@click.option("--spec-draft-n-min", "--draft-min", "draft_min", metavar="N", default=None,
              help=setting_help("draft_min"))
@click.option("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "ngld", metavar="N", default=None,
              help=setting_help("n_gpu_layers_draft"))
@click.option("--spec-type", "spec_type", metavar="TYPES", default=None, help=setting_help("spec_type"))
@click.option("-mm", "--mmproj", "mmproj", metavar="FILE", default=None,
              help="Multimodal projector GGUF of MODEL (llama-server's --mmproj): images on /api/chat, /api/generate "
                   "and /v1/chat/completions [env TQGGUF_MMPROJ].")
@click.option("-v", "--verbose", is_flag=True, help="Show every line of llama-server's log (default: warnings, errors).")
def command(model, ctk, ctv, ctx, parallel, max_ctx, flash_attn, rot, k_center, kv_boundary, kv_swa, kv_plan, host, port,
            keep_alive, n_gpu_layers, rpc, split_mode, tensor_split, main_gpu, device, threads, alias, draft_model, ctkd,
            ctvd, draft_max, draft_min, ngld, spec_type, mmproj, verbose):
    """Serve MODEL (a GGUF path or a name from `tqgguf models list`) with OpenAI (/v1) and
    Ollama (/api) compatible APIs, through a supervised llama-server child built by
    `tqgguf build` (or TQGGUF_LLAMA_SERVER). -np N slots of -c tokens each, continuously
    batched; other models are loaded on demand by name."""
    from ..config import SettingsError, check_listen_address, resolve_settings

    overrides = {"cache_type_k": ctk, "cache_type_v": ctv, "context_length": ctx, "num_parallel": parallel,
                 "flash_attention": flash_attn, "attn_rotation": rot, "k_center": k_center, "kv_boundary": kv_boundary,
                 "kv_swa": kv_swa, "kv_plan": kv_plan, "host": host, "port": port, "keep_alive": keep_alive,
                 "max_context": max_ctx, "draft_model": draft_model, "cache_type_k_draft": ctkd,
                 "cache_type_v_draft": ctvd, "draft_max": draft_max, "draft_min": draft_min, "n_gpu_layers_draft": ngld,
                 "spec_type": spec_type, "mmproj": mmproj,
                 **offload_overrides(n_gpu_layers=n_gpu_layers, rpc=rpc, split_mode=split_mode, tensor_split=tensor_split,
                                     main_gpu=main_gpu, device=device)}
    try:
        settings = resolve_settings(overrides)
        check_listen_address(settings)
    except SettingsError as e:
        for msg in e.errors:
            click.echo(f"error: {msg}", err=True)
        raise SystemExit(2) from None
    if 0 < settings.max_context < settings.context_length:
        click.echo(f"error: max_context {settings.max_context} ({settings.source('max_context')}) is below the context "
                   f"every slot is served with, {settings.context_length} ({settings.source('context_length')}), so "
                   f"the model could not be loaded with its own context; give at least {settings.context_length}, "
                   f"or 0 for the model's training context", err=True)
        raise SystemExit(2)

    import os

    from ..server.child import check_child_env

    try:  # LLAMA_ARG_* variables reach llama-server; a few would cut serve off from it
        check_child_env(dict(os.environ))
    except ValueError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(2) from None

    from ..server.run import PortError, bind_socket, end_by_signal, listen_source

    # fail on a taken port before any download or model load (serve() binds for real)
    try:
        bind_socket(settings.host, settings.port, listen_source(settings)).close()
    except PortError as e:
        raise click.ClickException(str(e)) from None

    from ..builder.driver import llama_server_path
    from ..devices import Offload
    from ..engine import GPUOffloadError

    offload = Offload.from_settings(settings)
    from ..devices import DeviceError, check_tensor_split

    try:
        check_tensor_split(offload.split_mode, [settings.cache_type_k, settings.cache_type_v], bool(offload.rpc))
    except DeviceError as e:
        raise click.UsageError(str(e)) from None
    if offload.rpc:  # every worker reachable and turbo-capable before anything starts (the child would abort)
        from ..values import parse_endpoints
        from ..devices import WorkerError, check_distinct, probe_worker

        try:
            check_distinct(parse_endpoints(offload.rpc))
            infos = [probe_worker(ep) for ep in parse_endpoints(offload.rpc)]
        except DeviceError as e:
            raise click.UsageError(str(e)) from None
        except WorkerError as e:
            raise click.ClickException(str(e)) from None
    else:
        infos = []
    # the devices llama-server will see: this engine's GPUs, then each worker's (RPC0, RPC1, ...)
    # — -dev, -ts and -mg are checked against them here, as ppl and bench check theirs
    if offload.device or offload.tensor_split or offload.main_gpu:
        from ..cachetypes import EngineNotBuiltError
        from ..devices import check_split, offload_devices

        try:
            local = [d.name for d in offload_devices()]
        except EngineNotBuiltError:
            local = []
        names = local + [f"RPC{i}" for i in range(sum(len(w.memory) for w in infos))]
        chosen = names if offload.device is None else \
            ([] if offload.device.lower() == "none" else offload.device.split(","))
        unknown = [n for n in chosen if n not in names]
        try:
            if unknown:
                raise DeviceError(f"-dev {offload.device}: no offload device {unknown[0]!r}; devices: "
                                  f"{', '.join(names) or 'none (CPU only)'}")
            check_split(split_mode=offload.split_mode, tensor_split=offload.tensor_split, main_gpu=offload.main_gpu,
                        n_devices=len(chosen))
        except DeviceError as e:
            raise click.UsageError(str(e)) from None
    from ..models import ModelError, resolve_model
    from ..server import ServeConfig, serve
    from ..server.child import ChildError
    from ..server.runner import DraftRefused

    try:
        binary = llama_server_path(settings.llama_server)
    except FileNotFoundError as e:
        raise click.ClickException(str(e)) from None
    if settings.max_loaded_models == 0:  # auto, as Ollama: 3 per GPU this llama-server lists, 3 on the CPU
        from ..config import auto_max_loaded_models
        from ..server.child import gpu_devices

        try:
            n_gpus = len(gpu_devices(binary))
        except (OSError, subprocess.TimeoutExpired) as e:
            raise click.ClickException(f"cannot ask {binary} for its devices ({settings.source('max_loaded_models')} "
                                       f"counts them): {e}") from None
        settings = settings.model_copy(update={"max_loaded_models": auto_max_loaded_models(n_gpus)})

    try:
        path = resolve_model(model)
    except ModelError as e:
        raise click.ClickException(str(e)) from None
    path = Path(path)
    from ..models import NoVocabularyError, refuse_no_vocabulary

    try:  # every request would abort llama-server (SIGABRT in llama_vocab::tokenize): refused here
        refuse_no_vocabulary(path, "`tqgguf serve` tokenizes every request")
    except NoVocabularyError as e:
        raise click.ClickException(str(e)) from None
    if not alias:  # a registry name is its own alias, an Ollama model its shortest name; a file is named by its stem
        from ..models import lookup

        found = None if Path(model).expanduser().is_file() else lookup(model)
        alias = path.stem if Path(model).expanduser().is_file() else found.name if found else model.strip().lower()
    from ..kvplan import GGUFReadError

    try:
        draft = _draft(settings, path)
        _check_mmproj(settings)
    except ModelError as e:
        raise click.ClickException(str(e)) from None
    engine_env_for = _EngineEnv(settings, threads)
    try:
        env = engine_env_for(path)  # the default model's, checked before anything starts
    except GGUFReadError as e:  # the file itself, not a flag
        raise click.ClickException(f"cannot serve {path.name}: {e}") from None
    except ValueError as e:  # KCenterError, KVPlanError: name the flag and what is allowed
        raise click.UsageError(str(e)) from None
    from ..server.modelfile import ModelFile

    train = ModelFile(path.stem, path).n_ctx_train()
    if train and settings.context_length > train:  # llama-server would cap every slot there (n_ctx_slot)
        click.echo(f"error: a context of {settings.context_length} tokens a slot ({settings.source('context_length')}) is more than "
                   f"{path.name}'s training context, {train} tokens: llama-server holds every slot to the training "
                   f"context, so the rest of each slot's KV cache would go unused; give -c {train} or less "
                   f"(each of the -np slots holds -c tokens)", err=True)
        raise SystemExit(2)
    config = ServeConfig(model_path=path, alias=alias, settings=settings, llama_server=binary,
                         n_gpu_layers=_ngl(settings.n_gpu_layers), offload=offload, n_threads=threads, verbose=verbose, engine_env=env,
                         engine_env_for=engine_env_for, engine_notes=engine_env_for.notes[path], draft=draft,
                         spec_type=settings.spec_type if draft is None else None, mmproj=settings.mmproj)
    try:
        stopped_by = serve(config, echo=_echo_err)
    except KeyboardInterrupt:  # Ctrl-C before uvicorn took over the signals (e.g. while the model loads)
        raise SystemExit(130) from None
    except GPUOffloadError as e:  # -ngl on a llama-server without a GPU device: a bad flag, as in ppl/bench/mix
        raise click.UsageError(str(e)) from None
    except PortError as e:
        raise click.ClickException(str(e)) from None
    except DraftRefused as e:  # -md names a draft llama-server cannot draft with: a bad flag
        raise click.UsageError(f"cannot serve {path.name} with the draft model from "
                               f"{settings.source('draft_model').describe()}: {e}") from None
    except (ChildError, RuntimeError) as e:
        raise click.ClickException(f"cannot serve {path.name}: {e}") from None
    end_by_signal(stopped_by)  # SIGINT: exit 130; SIGTERM: re-raised, the process ends by it


def _draft(settings, model_path: Path):
    """The draft model's DraftSpec (tqgguf.server.child) for these settings, None without
    ``-md``. The draft is resolved like MODEL (a path, or a registry name, pulled when
    missing: ModelError). ``-ngld`` defaults to ``-ngl``'s value. The engine's switches
    (rotation, K centering, the layer plan) are process-wide in llama-server, so they reach
    the draft's context too: a layer plan (named layers of MODEL) and a K centering
    calibration file (MODEL's vectors) are refused with a draft of another file, by name."""
    from ..models import resolve_model
    from ..server.child import DraftSpec
    from ..values import parse_k_center

    if not settings.draft_model:
        return None
    dpath = Path(resolve_model(settings.draft_model))
    src = settings.source("draft_model")
    plan = next((n for n in ("kv_plan", "kv_boundary", "kv_swa") if getattr(settings, n)), None)
    if plan is not None:
        raise click.UsageError(f"the layer plan ({settings.source(plan).describe()}) cannot be used with a "
                               f"draft model (-md, from {src.describe()}): llama-server applies the layer plan "
                               "(LLAMA_KV_PLAN) to every context it runs, the draft's too; give the draft's K/V types "
                               "with -ctkd/-ctvd and leave the layer plan out")
    if parse_k_center(settings.k_center).mode == "calib" and dpath.resolve() != Path(model_path).resolve():
        raise click.UsageError(f"--k-center {settings.k_center} (from {settings.source('k_center').describe()}) "
                               f"cannot be used with the draft model {dpath.name} (from {src.describe()}): the "
                               "calibration vectors are MODEL's, and llama-server applies them to the draft's "
                               "context too; use --k-center auto, bias or off")
    ngld = settings.n_gpu_layers_draft if settings.n_gpu_layers_draft is not None else settings.n_gpu_layers
    return DraftSpec(model=dpath, ctk=settings.cache_type_k_draft, ctv=settings.cache_type_v_draft,
                     spec_type=settings.spec_type or "draft-simple", n_gpu_layers=_ngl(ngld),
                     n_max=settings.draft_max, n_min=settings.draft_min)


def _check_mmproj(settings) -> None:
    """``--mmproj`` must name a projector GGUF (``general.architecture`` "clip", as
    llama.cpp's convert script writes them); a text model given there is refused by name
    (llama-server would fail with "failed to load multimodal model")."""
    from ..server.modelfile import read_gguf_metadata

    if settings.mmproj is None:
        return
    src = settings.source("mmproj").describe()
    try:
        arch = read_gguf_metadata(settings.mmproj).get("general.architecture")
    except (OSError, ValueError) as e:
        raise click.UsageError(f"--mmproj {settings.mmproj} ({src}): cannot be read as a GGUF file: {e}") from None
    if arch != "clip":
        raise click.UsageError(f"--mmproj {settings.mmproj} ({src}) is not a multimodal projector: its "
                               f"general.architecture is {arch!r}, a projector's is 'clip' (an mmproj-*.gguf file "
                               "published beside a vision model's GGUF)")


def _ngl(value: str) -> int | None:
    """The -ngl setting as llama-server's child takes it: None for auto (its own default, fit to
    the devices), -1 for all, else the count."""
    return None if value == "auto" else -1 if value == "all" else int(value)


class _EngineEnv:
    """The engine variables llama-server must see for a model under these settings: exactly
    what ``tqgguf.engine.engine_env`` sets for the in-process engine (rotation, K centering,
    the layer plan), so the child and ``tqgguf ppl`` read the same switches. Per model, since
    ``--k-center auto`` and a layer plan depend on the model (its K bias, its layers); cached,
    and ``notes[path]`` holds the startup lines that say what was chosen and why.
    ``--k-center calib`` computes its calibration file first (that step loads the model
    in-process once). Raises KCenterError / KVPlanError (ValueErrors) naming the flag."""

    def __init__(self, settings, threads: int | None):
        self.settings, self.threads = settings, threads
        self.envs: dict[Path, dict[str, str]] = {}
        self.notes: dict[Path, list[str]] = {}

    def __call__(self, path: Path) -> dict[str, str]:
        path = Path(path)
        if path not in self.envs:
            self.envs[path] = self._compute(path)
        return dict(self.envs[path])

    def _compute(self, path: Path) -> dict[str, str]:
        import os

        from ..cachetypes import FLASH_ATTN_RULE, flash_attn_conflict
        from ..values import parse_k_center
        from ..engine import engine_env
        from ..enginevars import warn_overrides
        from ..kcenter import check_full, engine_value, resolve_auto
        from ..kvplan import build_plan

        s = self.settings
        plan = build_plan(path, boundary=s.kv_boundary, swa=s.kv_swa, plan=s.kv_plan)
        for v in sorted(plan.v_types(s.cache_type_v)) if plan else ():
            if flash_attn_conflict(s.flash_attention, v):
                raise ValueError(f"flash attention is off (from {s.source('flash_attention').describe()}), which "
                                 f"cannot be used with the layer plan's quantized V cache type {v} (from "
                                 f"{s.source('kv_plan' if s.kv_plan else 'kv_swa' if s.kv_swa else 'kv_boundary').describe()}); "
                                 f"{FLASH_ATTN_RULE}")
        kc, reason = parse_k_center(s.k_center), ""
        if kc.mode == "auto":
            kc, reason = resolve_auto(path, plan.k_types(s.cache_type_k) if plan else {s.cache_type_k},
                                      streams=s.num_parallel)
        try:
            check_full(kc, path, streams=s.num_parallel)
        except ValueError as e:  # it names -np and --k-center: say where each value came from
            raise type(e)(f"{e} (-np {s.num_parallel} from {s.source('num_parallel').describe()}, --k-center "
                          f"from {s.source('k_center').describe()})") from None
        kc_env = engine_value(kc, path, n_threads=self.threads)
        plan_env = plan.engine_value() if plan else ""
        notes = []
        if reason:
            notes.append(f"k-center: auto (from {s.source('k_center')}) -> {kc}: {reason}")
        elif kc.mode != "off":
            notes.append(f"k-center: {kc} (from {s.source('k_center')})")
        if plan:
            notes.append(f"layer plan: {plan.source} -> LLAMA_KV_PLAN={plan_env}")
        self.notes[path] = notes
        warn_overrides({"LLAMA_ATTN_ROT_DISABLE": "0" if s.attn_rotation else "1", "LLAMA_K_CENTER": kc_env,
                        "LLAMA_KV_PLAN": plan_env},
                       {"LLAMA_ATTN_ROT_DISABLE": f"rotation {'on' if s.attn_rotation else 'off'}",
                        "LLAMA_K_CENTER": f"--k-center {kc}" + (" (auto)" if reason else ""),
                        "LLAMA_KV_PLAN": plan.source if plan else "no layer plan"}, echo=_echo_err)
        before = dict(os.environ)
        with engine_env(rotation=s.attn_rotation, k_center=kc_env, kv_plan=plan_env):
            return {k: v for k, v in os.environ.items() if before.get(k) != v}
