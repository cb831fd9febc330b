"""Images in requests: Ollama's ``images`` translated to what llama-server takes, and the 400
for an image sent to a model served without a projector.

llama-server (started with ``--mmproj``) takes images as OpenAI content parts on its
``/v1/chat/completions`` (``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``;
an http(s) URL it downloads itself) and, on ``/completion``, as a prompt object
``{"prompt_string": "...<marker>...", "multimodal_data": ["<base64>", ...]}`` whose text
holds one media marker per image (its ``/apply-template`` writes them where the parts
were). Ollama's API sends images as a list of base64 strings: ``messages[].images`` on
``/api/chat``, ``images`` on ``/api/generate``.

Pure functions only (no I/O).
"""
from __future__ import annotations

import base64
import binascii
from typing import Any

from .ollama import RequestError

#: OpenAI content part types that carry media (llama-server's oaicompat_content_load_media).
MEDIA_PARTS = ("image_url", "input_audio", "input_video", "video_url")

#: File signatures -> MIME type, for the data: URL of an Ollama image (llama-server decodes
#: the bytes whatever the type says; the type is for logs and for correctness).
_SIGNATURES = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF87a", "image/gif"),
               (b"GIF89a", "image/gif"), (b"BM", "image/bmp"))


def no_projector(model: str) -> RequestError:
    """The 400 for media sent to a model served without a vision projector."""
    return RequestError(400, f"model {model!r} does not support images: it is served without a vision projector; "
                             f"start it with `tqgguf serve {model} --mmproj FILE` (or TQGGUF_MMPROJ), FILE being the "
                             "model's multimodal projector GGUF (mmproj-*.gguf)", param="messages",
                        code="images_not_supported")


def openai_media(body: dict) -> bool:
    """True when an OpenAI chat request's ``messages`` hold a media content part
    (:data:`MEDIA_PARTS`)."""
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        return False
    return any(isinstance(m, dict) and isinstance(m.get("content"), list)
               and any(isinstance(p, dict) and p.get("type") in MEDIA_PARTS for p in m["content"]) for m in msgs)


def image_data(image: Any, where: str) -> str:
    """One Ollama image (base64 text, optionally already a ``data:`` URL) checked and returned
    as plain base64. Raises RequestError naming ``where`` (e.g. ``messages[0].images[1]``)
    when it is not a string or not valid base64."""
    if not isinstance(image, str) or not image.strip():
        raise RequestError(400, f"{where} must be a base64-encoded image (a string)")
    s = image.strip()
    if s.startswith("data:"):
        head, _, s = s.partition(",")
        if not head.endswith(";base64"):
            raise RequestError(400, f"{where}: a data: URL must be base64-encoded (data:image/png;base64,...)")
    try:
        raw = base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(400, f"{where} is not valid base64 (Ollama's images are base64-encoded image files)") from None
    if not raw:
        raise RequestError(400, f"{where} is empty")
    return s


def data_url(b64: str) -> str:
    """``data:<type>;base64,<b64>`` with the type read from the file's signature (PNG,
    JPEG, GIF, BMP, WebP; else image/png)."""
    head = base64.b64decode(b64[:24] + "=" * (-len(b64[:24]) % 4))
    mime = next((m for sig, m in _SIGNATURES if head.startswith(sig)), None)
    if mime is None:
        mime = "image/webp" if head[:4] == b"RIFF" and head[8:12] == b"WEBP" else "image/png"
    return f"data:{mime};base64,{b64}"


def images(value: Any, where: str) -> list[str]:
    """An Ollama ``images`` field (absent, null or a list of base64 strings) as checked
    base64 strings; RequestError naming ``where`` otherwise."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise RequestError(400, f"{where} must be a list of base64-encoded images")
    return [image_data(x, f"{where}[{i}]") for i, x in enumerate(value)]


#: The text put between two images that would otherwise be adjacent in a prompt. llama-server
#: (this engine's tools/server/server-common.cpp, ``server_tokens::keep_first``) throws "Chunk
#: not found" — a 500 — when a cached prompt is cut exactly between two adjacent images: a
#: request with images [a, b] followed by one with [a] and other text (a chat that drops an
#: image, Ollama's clients resending history) fails. A token between them makes every cut
#: there a cut after a text token, which it handles.
IMAGE_SEPARATOR = "\n"


def content_parts(text: str, imgs: list[str]) -> list[dict]:
    """OpenAI content parts for an Ollama message with images: the images first (as Ollama's
    prompt builder puts a message's images before its text), each pair separated by
    :data:`IMAGE_SEPARATOR`, then the text."""
    parts: list[dict] = []
    for i, b in enumerate(imgs):
        if i:
            parts.append({"type": "text", "text": IMAGE_SEPARATOR})
        parts.append({"type": "image_url", "image_url": {"url": data_url(b)}})
    if text:
        parts.append({"type": "text", "text": text})
    return parts


def separate_media(body: dict) -> bool:
    """Put a :data:`IMAGE_SEPARATOR` text part between every two adjacent media parts of an
    OpenAI chat request's messages, in place (see there why); True when something changed."""
    changed = False
    for m in body.get("messages") or []:
        c = m.get("content") if isinstance(m, dict) else None
        if not isinstance(c, list):
            continue
        out: list = []
        for p in c:
            if (isinstance(p, dict) and p.get("type") in MEDIA_PARTS and out and isinstance(out[-1], dict)
                    and out[-1].get("type") in MEDIA_PARTS):
                out.append({"type": "text", "text": IMAGE_SEPARATOR})
                changed = True
            out.append(p)
        m["content"] = out
    return changed


def attach_images(messages: list[dict], vision: bool, model: str) -> list[dict]:
    """``ollama.chat_messages``' output with each message's Ollama ``images`` turned into
    OpenAI content parts (:func:`content_parts`), in place; returns ``messages``. Raises
    RequestError: :func:`no_projector` when a message has images and ``vision`` is False,
    or a bad image (naming ``messages[i].images[j]``)."""
    for i, m in enumerate(messages):
        if "images" not in m:
            continue
        raw = m.pop("images")
        if raw and not vision:
            raise no_projector(model)
        imgs = images(raw, f"messages[{i}].images")
        if imgs:
            m["content"] = content_parts(m.get("content") or "", imgs)
    return messages
