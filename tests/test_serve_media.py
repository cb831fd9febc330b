"""``tqgguf serve`` with a draft model (speculative decoding) and with a vision projector,
as a user runs them: real ``tqgguf serve`` processes fronting real llama-server children,
driven by the real ``openai`` and ``ollama`` clients (httpx for raw HTTP details).

Two servers, both SmolLM2-135M with turbo K/V caches (q8_0 / turbo4):

- ``spec``: SmolLM2-135M as its own draft (``-md smollm2-135m``) with a turbo3 draft K cache
  from a flag and a turbo3 draft V cache from ``TQGGUF_KV_CACHE_TYPE_V_DRAFT``; no projector,
  so it also answers the "image to a text-only model" 400s;
- ``vision``: ``--mmproj`` (from ``TQGGUF_MMPROJ``) = a random-weight LLaVA-style projector
  written by ``tests.synthetic.tiny_mmproj_gguf`` for SmolLM2's 576-wide embeddings: 32x32
  pixels in 8x8 patches, so every image is 16 image tokens in the prompt. Its answers are
  meaningless; the path (image in, projector, the text model's KV cache) is real. It is also
  the plain-decoding reference for the draft server (same model, same K/V types, no draft).

CLI refusals run short-lived processes that never load a model.
"""
from __future__ import annotations

import base64
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import httpx
import pytest

from tests.synthetic import tiny_mmproj_gguf
from tqgguf.server.media import content_parts
from tests.test_server import Server, _clean_env, _serve_cmd

ollama = pytest.importorskip("ollama")
openai = pytest.importorskip("openai")

ALIAS = "smollm2-135m"
CTX = 512
IMAGE_TOKENS = 16  # (32 / 8) ** 2 patches of tiny_mmproj_gguf's defaults
SMOL_N_EMBD = 576  # SmolLM2-135M's llama.embedding_length
GREEDY = {"temperature": 0, "repeat_penalty": 1.0}


def png(width: int, height: int, seed: int) -> bytes:
    """An RGB PNG of ``width`` x ``height`` pixels whose content depends on ``seed`` (each seed
    a different image, so llama-server's prompt cache cannot reuse another one's embeddings)."""
    rows = b"".join(b"\x00" + bytes((x * 7 + y * 3 + seed * 31 + c) % 256 for x in range(width) for c in range(3))
                    for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def image_part(seed: int) -> dict:
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," +
                                                      base64.b64encode(png(40, 30, seed)).decode()}}


@pytest.fixture(scope="module")
def model_path(require_engine, model_file) -> Path:
    return model_file(ALIAS)


@pytest.fixture(scope="module")
def mmproj(tmp_path_factory) -> Path:
    return tiny_mmproj_gguf(tmp_path_factory.mktemp("mmproj") / "mmproj-smollm2-test.gguf", n_embd_text=SMOL_N_EMBD)


@pytest.fixture(scope="module")
def spec(model_path, tmp_path_factory):
    s = Server(ALIAS, tmp_path_factory.mktemp("spec"), "--ctk", "q8_0", "--ctv", "turbo4", "-c", str(CTX),
               "--keep-alive", "-1", "-md", ALIAS, "-ctkd", "turbo3",
               env=_clean_env(TQGGUF_KV_CACHE_TYPE_V_DRAFT="turbo3"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def vision(model_path, mmproj, tmp_path_factory):
    s = Server(ALIAS, tmp_path_factory.mktemp("vision"), "--ctk", "q8_0", "--ctv", "turbo4", "-c", str(CTX),
               "--keep-alive", "-1", env=_clean_env(TQGGUF_MMPROJ=str(mmproj)))
    yield s
    s.stop()


# -- speculative decoding ---------------------------------------------------------------------


def test_draft_model_and_its_kv_types_are_reported_with_their_sources(spec, model_path):
    log = spec.log()
    assert (f"draft model: {model_path} (from flag -md): KV cache K turbo3 (from flag -ctkd), V turbo3 (from env "
            "TQGGUF_KV_CACHE_TYPE_V_DRAFT); --spec-type draft-simple (from default with a draft model)") in log
    argv = Path(f"/proc/{spec.health()[1]['runners'][0]['pid']}/cmdline").read_bytes().split(b"\0")
    a = [x.decode() for x in argv]
    # what the child really runs with: the draft, its K/V types, and a draft type (without one,
    # llama-server loads the -md model and never drafts with it)
    assert a[a.index("-md") + 1] == str(model_path)
    assert (a[a.index("-ctkd") + 1], a[a.index("-ctvd") + 1], a[a.index("--spec-type") + 1]) == \
        ("turbo3", "turbo3", "draft-simple")
    # -ngl is auto here, and -ngld follows it: llama-server's own auto, so no -ngld is passed
    assert "-ngld" not in a and "-ngld auto (as -ngl, from default)" in log


def test_speculative_output_equals_plain_decoding_and_drafts_are_accepted(spec, vision, model_path):
    msgs = [{"role": "user", "content": "List the days of the week, one per line."}]
    kw = dict(model=ALIAS, messages=msgs, max_tokens=48, temperature=0)
    with_draft = spec.oa.chat.completions.create(**kw)
    plain = vision.oa.chat.completions.create(**kw)  # same model and K/V types, no draft
    text = with_draft.choices[0].message.content
    assert with_draft.usage.completion_tokens >= 16 and text == plain.choices[0].message.content
    timings = with_draft.model_extra["timings"]
    assert 0 < timings["draft_n_accepted"] <= timings["draft_n"]  # llama-server's own counts, passed through
    assert "draft_n" not in plain.model_extra["timings"]
    # the Ollama route runs the same child: same greedy text
    r = spec.ol.chat(model=ALIAS, messages=msgs, options={**GREEDY, "num_predict": 48})
    assert r.message.content == text
    draft = spec.health()[1]["runners"][0]["draft"]  # summed from llama-server's "draft acceptance" lines
    assert draft["model"] == model_path.name
    assert 0 < draft["accepted"] <= draft["generated"]


# -- images to a model without a projector ------------------------------------------------------


def test_an_image_to_a_text_only_model_is_a_400_naming_mmproj(spec):
    img = png(40, 30, 1)
    with pytest.raises(ollama.ResponseError) as e:
        spec.ol.chat(model=ALIAS, messages=[{"role": "user", "content": "What is this?", "images": [img]}])
    assert e.value.status_code == 400 and "--mmproj" in str(e.value) and "does not support images" in str(e.value)
    with pytest.raises(ollama.ResponseError) as e:
        spec.ol.generate(model=ALIAS, prompt="What is this?", images=[img])
    assert e.value.status_code == 400 and "--mmproj" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        spec.oa.chat.completions.create(model=ALIAS, max_tokens=4, messages=[
            {"role": "user", "content": [{"type": "text", "text": "What is this?"}, image_part(1)]}])
    assert "--mmproj" in e.value.message and e.value.code == "images_not_supported"
    assert spec.health()[1]["runners"][0]["restarts"] == 0  # refused in front; the child never saw it
    assert "vision" not in spec.ol.show(ALIAS).capabilities


# -- vision ----------------------------------------------------------------------------------------


def test_vision_startup_line_names_the_projector_and_its_source(vision, mmproj):
    assert f"vision projector: {mmproj} (from env TQGGUF_MMPROJ): images on /api/chat" in vision.log()
    h = vision.health()[1]["runners"][0]
    assert h["mmproj"] == mmproj.name and "draft" not in h
    assert "vision" in vision.ol.show(ALIAS).capabilities  # Ollama's capability, as clients check it


def test_openai_image_url_adds_the_image_tokens_to_the_prompt(vision):
    def prompt_tokens(*images: dict) -> int:
        r = vision.oa.chat.completions.create(model=ALIAS, max_tokens=2, temperature=0, messages=[
            {"role": "user", "content": [*images, {"type": "text", "text": "Describe the picture."}]}])
        return r.usage.prompt_tokens

    none = prompt_tokens()
    assert prompt_tokens(image_part(10)) == none + IMAGE_TOKENS
    # two adjacent images get one separating token ("\n") in front: see media.IMAGE_SEPARATOR
    a, b = image_part(11), image_part(12)
    assert prompt_tokens(a, b) == none + 2 * IMAGE_TOKENS + 1
    assert prompt_tokens(a) == none + IMAGE_TOKENS  # llama-server's "Chunk not found" 500 without the separator


def test_ollama_chat_images_reach_the_projector_streamed_or_not(vision):
    def chat(*seeds: int, stream: bool = False):
        msgs = [{"role": "user", "content": "Describe the picture.", "images": [png(40, 30, s) for s in seeds]}]
        r = vision.ol.chat(model=ALIAS, messages=msgs, options={**GREEDY, "num_predict": 3}, stream=stream)
        return list(r)[-1] if stream else r

    chat(20)  # the prompt cache now holds everything before the image
    one, two = chat(21), chat(22, 23)  # fresh images: only what follows the cached prefix is evaluated
    assert one.done_reason == "length" and two.prompt_eval_count - one.prompt_eval_count == IMAGE_TOKENS + 1
    last = chat(22, stream=True)  # [a, b] then [a]: the cut llama-server fails on between adjacent images
    assert last.done and last.eval_count == 3 and last.prompt_eval_count >= 1


def test_ollama_generate_images_raw_or_templated_and_no_context(vision):
    opts = {**GREEDY, "num_predict": 3}
    one = vision.ol.generate(model=ALIAS, prompt="Describe.", images=[png(40, 30, 30)], options=opts)
    two = vision.ol.generate(model=ALIAS, prompt="Describe.", images=[png(40, 30, 31), png(40, 30, 32)], options=opts)
    assert one.eval_count == 3 and two.prompt_eval_count - one.prompt_eval_count == IMAGE_TOKENS + 1
    assert one.context is None  # image embeddings are not tokens a context could carry back
    raw = list(vision.ol.generate(model=ALIAS, prompt="A picture:", images=[png(40, 30, 33)], raw=True, stream=True,
                                  options=opts))
    assert raw[-1].done and raw[-1].prompt_eval_count >= IMAGE_TOKENS and raw[-1].context is None
    r = vision.http.post("/api/generate", json={"model": ALIAS, "prompt": "x", "images": [base64.b64encode(
        png(8, 8, 1)).decode()], "context": [1, 2, 3], "stream": False})
    assert r.status_code == 400 and "context cannot be combined with images" in r.json()["error"]


def _picture_chat(turns: int) -> list[dict]:
    """An Ollama conversation: a system prompt, ``turns`` questions each with a picture of its own
    and a short answer, then the latest question with its picture (base64, as Ollama sends them)."""
    b64 = lambda seed: base64.b64encode(png(40, 30, seed)).decode()  # noqa: E731
    msgs = [{"role": "system", "content": "You name each picture in one word."}]
    for i in range(turns):
        msgs += [{"role": "user", "content": f"Picture {i}: what is it?", "images": [b64(100 + i)]},
                 {"role": "assistant", "content": "A pattern."}]
    return msgs + [{"role": "user", "content": "And this last one?", "images": [b64(99)]}]


def _as_openai(msgs: list[dict]) -> list[dict]:
    """The same messages as the OpenAI API takes them (what /api/chat sends llama-server)."""
    return [{"role": m["role"], "content": content_parts(m["content"], m["images"])}
            if "images" in m else m for m in msgs]


def test_a_chat_with_images_longer_than_the_context_keeps_the_system_prompt_and_the_latest_image(vision):
    msgs = _picture_chat(24)  # about twice the context
    r = vision.http.post("/api/chat", json={"model": ALIAS, "messages": msgs, "stream": False,
                                            "options": {**GREEDY, "num_predict": 2}})
    assert r.status_code == 200, r.text
    assert r.json()["done"] and r.json()["eval_count"] > 0
    note = re.fullmatch(r"(\d+) of (\d+) messages, (\d+) of (\d+) tokens, (\d+) of (\d+) images dropped",
                        r.headers["X-Tqgguf-Truncated"])
    assert note, r.headers
    dropped, n_msgs, dropped_tok, total, dropped_img, n_img = map(int, note.groups())
    assert (n_msgs, n_img) == (len(msgs), 25) and total > CTX and 0 < dropped <= len(msgs) - 2
    # what was kept: the system prompt, then the latest messages, the last one with its picture
    kept = [msgs[0]] + msgs[1 + dropped:]
    assert dropped_img == sum("images" in m for m in msgs[1:1 + dropped])
    # the kept prompt as llama-server counts it when it answers, image tokens included
    n_kept = vision.oa.chat.completions.create(model=ALIAS, messages=_as_openai(kept), max_tokens=1,
                                               temperature=0).usage.prompt_tokens
    assert n_kept == total - dropped_tok < CTX
    # and the first start that fits: one message more would not
    more = vision.http.post("/v1/chat/completions/input_tokens",
                            json={"model": ALIAS, "messages": _as_openai([msgs[0]] + msgs[dropped:])})
    assert more.json()["input_tokens"] >= CTX
    log = vision.log()
    assert (f"the chat prompt ({total} tokens, {n_msgs} messages) is longer than the context ({CTX} tokens): dropped "
            f"the {dropped} oldest non-system message(s), {dropped_tok} tokens, as Ollama truncates; kept "
            f"{len(kept)} message(s), {n_kept} tokens; images: {dropped_img} dropped, {n_img - dropped_img} kept") in log
    # streamed through the real client, the same conversation answers too
    parts = list(vision.ol.chat(model=ALIAS, messages=msgs, stream=True, options={**GREEDY, "num_predict": 2}))
    assert parts[-1].done and parts[-1].eval_count > 0


def test_bad_images_are_400s_that_name_the_field(vision):
    r = vision.http.post("/api/chat", json={"model": ALIAS, "stream": False, "messages": [
        {"role": "user", "content": "x", "images": ["not base64 at all!"]}]})
    assert r.status_code == 400 and "messages[0].images[0] is not valid base64" in r.json()["error"]
    r = vision.http.post("/api/generate", json={"model": ALIAS, "prompt": "x", "images": [123], "stream": False})
    assert r.status_code == 400 and "images[0] must be a base64-encoded image" in r.json()["error"]
    assert vision.health()[0] == 200


# -- refused before anything loads ---------------------------------------------------------------


def _refused(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(_serve_cmd(ALIAS, "--port", str(_free_port()), *args), capture_output=True, text=True, timeout=120,
                          env=env or _clean_env())


def test_bad_draft_and_projector_settings_are_refused_by_name(tmp_path, model_path):
    r = _refused("-md", ALIAS, "-ctkd", "q9")
    assert r.returncode == 2 and "-ctkd 'q9': unknown cache type; allowed: " in r.stderr and "turbo3" in r.stderr
    r = _refused(env=_clean_env(TQGGUF_KV_CACHE_TYPE_V_DRAFT="turbo5"))
    assert r.returncode == 2 and "TQGGUF_KV_CACHE_TYPE_V_DRAFT='turbo5': unknown cache type" in r.stderr
    r = _refused("--spec-type", "draft-simple")
    assert r.returncode == 2 and "draft-simple needs a draft model; give one with -md" in r.stderr
    r = _refused("--spec-type", "draft-fast")
    assert r.returncode == 2 and "unknown speculative decoding type 'draft-fast'; allowed:" in r.stderr
    r = _refused("-md", ALIAS, "--spec-type", "ngram-mod")
    assert r.returncode == 2 and "would load the draft and never use it" in r.stderr
    r = _refused("-md", ALIAS, "-ctvd", "turbo3", "-fa", "off")
    assert r.returncode == 2 and "the draft model's V cache type turbo3 (from flag -ctvd" in r.stderr
    r = _refused("--mmproj", str(tmp_path / "missing.gguf"))
    assert r.returncode == 2 and "missing.gguf'" in r.stderr and "is not a file" in r.stderr


def test_a_text_model_or_a_mismatched_projector_is_refused(tmp_path, model_path):
    port = str(_free_port())
    r = subprocess.run(_serve_cmd(ALIAS, "--port", port, "--mmproj", str(model_path)), capture_output=True, text=True,
                       timeout=120, env=_clean_env())
    assert r.returncode == 2 and "is not a multimodal projector: its general.architecture is 'llama'" in r.stderr
    wrong = tiny_mmproj_gguf(tmp_path / "mmproj-64.gguf", n_embd_text=64)  # not SmolLM2's 576
    r = subprocess.run(_serve_cmd(ALIAS, "--port", port, "-t", "2", "-c", "256", "--mmproj", str(wrong)),
                       capture_output=True, text=True, timeout=180, env=_clean_env())
    # llama-server's own reason, from its log, and no traceback
    assert r.returncode == 1 and "mismatch between text model (n_embd = 576) and mmproj (n_embd = 64)" in r.stderr
    assert "Traceback" not in r.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_media_helpers_sniff_types_and_separate_adjacent_images():
    from tqgguf.server import media

    jpeg = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\0" * 20).decode()
    assert media.data_url(jpeg).startswith("data:image/jpeg;base64,")
    assert media.data_url(base64.b64encode(png(2, 2, 0)).decode()).startswith("data:image/png;base64,")
    body = {"messages": [{"role": "user", "content": [image_part(1), image_part(2), {"type": "text", "text": "hi"},
                                                        image_part(3)]}]}
    assert media.separate_media(body)
    assert [p["type"] for p in body["messages"][0]["content"]] == ["image_url", "text", "image_url", "text", "image_url"]
    assert not media.separate_media(body)  # already separated
    assert media.content_parts("hi", []) == [{"type": "text", "text": "hi"}]
