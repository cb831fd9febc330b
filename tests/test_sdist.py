"""Fetching the pinned llama-cpp-python sdist through pip, with no network: a local PEP 503
index directory, an index without the package, an unreachable index, wrong or truncated
bytes, a bad ``TQGGUF_SDIST`` and a Python without pip. Each ends in the verified file or
in a SourceError that says what was tried and the two ways out."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tqgguf.builder import source
from tqgguf.builder.source import PIN, SourceError

PROJECT = "llama-cpp-python"  # PEP 503 normalised name


@pytest.fixture(scope="module")
def real_sdist() -> Path:
    """The verified pinned sdist (fetched through this machine's pip settings the first time)."""
    return source.fetch_sdist(log=lambda m: None)


def make_index(root: Path, files: dict[str, Path | bytes], project: str = PROJECT) -> str:
    """A PEP 503 simple index under ``root`` with one project holding ``files`` (name ->
    a file to link, or bytes); returns its ``file://`` URL."""
    d = root / "simple" / project
    d.mkdir(parents=True)
    links = []
    for name, content in files.items():
        if isinstance(content, Path):
            (d / name).symlink_to(content)
        else:
            (d / name).write_bytes(content)
        links.append(f'<a href="{name}">{name}</a>')
    (d / "index.html").write_text("<!DOCTYPE html><html><body>" + "".join(links) + "</body></html>\n")
    return (root / "simple").as_uri()


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """An empty TQGGUF_CACHE and a pip that reads only what the test sets: no config file
    (this machine's has extra-index-url and find-links), no extra index, no find-links,
    no retries. Returns a function that sets PIP_INDEX_URL."""
    monkeypatch.delenv("TQGGUF_SDIST", raising=False)
    monkeypatch.setenv("TQGGUF_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "5")
    return lambda url: monkeypatch.setenv("PIP_INDEX_URL", url)


def _sdist_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "sdist"


def fake_sdist(tmp_path: Path) -> bytes:
    """A valid sdist named like the pin (pip reads its metadata) whose bytes are not the pin's."""
    top = tmp_path / "fake" / PIN.tree_name
    top.mkdir(parents=True)
    (top / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "backend"\n'
                                        'backend-path = ["."]\n\n[project]\nname = "llama_cpp_python"\n'
                                        f'version = "{PIN.version}"\n')
    meta = f"Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: {PIN.version}\n"
    (top / "PKG-INFO").write_text(meta)
    (top / "backend.py").write_text(
        "import os\n\n\ndef get_requires_for_build_wheel(config_settings=None):\n    return []\n\n\n"
        "def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):\n"
        f"    name = 'llama_cpp_python-{PIN.version}.dist-info'\n"
        "    os.makedirs(os.path.join(metadata_directory, name))\n"
        "    with open(os.path.join(metadata_directory, name, 'METADATA'), 'w') as f:\n"
        f"        f.write({meta!r})\n"
        "    return name\n")
    out = tmp_path / "fake" / PIN.sdist_name
    with tarfile.open(out, "w:gz") as tf:
        tf.add(top, arcname=PIN.tree_name)
    return out.read_bytes()


def test_fetch_through_a_local_index_directory(offline, real_sdist, tmp_path):
    offline(make_index(tmp_path / "idx", {PIN.sdist_name: real_sdist}))
    logs: list[str] = []
    got = source.fetch_sdist(log=logs.append)
    assert got == _sdist_dir(tmp_path) / PIN.sdist_name
    assert source.sha256_file(got) == PIN.sha256 and got.stat().st_size == real_sdist.stat().st_size
    assert logs == [f"fetching {PIN.package}=={PIN.version} (sdist) through pip"]
    assert [p.name for p in _sdist_dir(tmp_path).iterdir()] == [PIN.sdist_name]  # no temp dir left
    offline("http://127.0.0.1:9/simple")  # the cached copy is used; pip is not asked again
    logs.clear()
    assert source.fetch_sdist(log=logs.append) == got and logs == []


def test_an_index_without_the_package_is_a_clear_error(offline, tmp_path):
    url = make_index(tmp_path / "idx", {"other-1.0.tar.gz": b"x"}, project="other")
    offline(url)
    with pytest.raises(SourceError) as e:
        source.fetch_sdist(log=lambda m: None)
    msg = str(e.value)
    assert f"could not fetch {PIN.package}=={PIN.version} through pip" in msg
    assert "-m pip download --no-deps --no-binary :all:" in msg                     # what was run
    assert f"Looking in indexes: {url}" in msg                                        # where pip looked
    assert f"No matching distribution found for {PIN.package}=={PIN.version}" in msg  # pip's own words
    assert "TQGGUF_SDIST=PATH" in msg and "PIP_INDEX_URL" in msg                      # the two ways out
    assert list(_sdist_dir(tmp_path).iterdir()) == []


def test_no_network_is_a_clear_error(offline, tmp_path):
    offline("http://127.0.0.1:9/simple")  # nothing listens on the discard port
    with pytest.raises(SourceError) as e:
        source.fetch_sdist(log=lambda m: None)
    msg = str(e.value)
    assert "Looking in indexes: http://127.0.0.1:9/simple" in msg and "exit status 1" in msg
    assert "TQGGUF_SDIST=PATH" in msg and PIN.sha256 in msg


def test_other_bytes_under_the_pinned_name_are_refused_and_not_kept(offline, tmp_path):
    fake = fake_sdist(tmp_path)
    offline(make_index(tmp_path / "idx", {PIN.sdist_name: fake}))
    with pytest.raises(SourceError) as e:
        source.fetch_sdist(log=lambda m: None)
    msg = str(e.value)
    assert f"has sha256 {hashlib.sha256(fake).hexdigest()}, not the pin {PIN.sha256}" in msg
    assert "nothing was kept" in msg and "TQGGUF_SDIST=PATH" in msg
    assert list(_sdist_dir(tmp_path).iterdir()) == []


def test_a_truncated_tqgguf_sdist_is_refused_naming_both_digests(offline, real_sdist, tmp_path, monkeypatch):
    cut = tmp_path / PIN.sdist_name
    with open(real_sdist, "rb") as f:
        cut.write_bytes(f.read(1 << 20))
    monkeypatch.setenv("TQGGUF_SDIST", str(cut))
    with pytest.raises(SourceError) as e:
        source.fetch_sdist(log=lambda m: None)
    digest = hashlib.sha256(cut.read_bytes()).hexdigest()
    assert f"TQGGUF_SDIST={cut}: sha256 {digest} does not match the pin {PIN.sha256}" in str(e.value)
    assert cut.exists()  # the user's file is never deleted


def test_a_truncated_cached_copy_is_fetched_again(offline, real_sdist, tmp_path):
    cached = _sdist_dir(tmp_path) / PIN.sdist_name
    cached.parent.mkdir(parents=True)
    with open(real_sdist, "rb") as f:
        cached.write_bytes(f.read(4096))
    offline(make_index(tmp_path / "idx", {PIN.sdist_name: real_sdist}))
    logs: list[str] = []
    assert source.fetch_sdist(log=logs.append) == cached
    assert source.sha256_file(cached) == PIN.sha256
    assert "does not match the pin" in logs[0] and "fetching it again" in logs[0]


def test_tqgguf_sdist_that_is_a_directory_or_missing(offline, tmp_path, monkeypatch):
    monkeypatch.setenv("TQGGUF_SDIST", str(tmp_path))
    with pytest.raises(SourceError, match=r"TQGGUF_SDIST=.* is not a file \(a directory\?\)"):
        source.fetch_sdist(log=lambda m: None)
    monkeypatch.setenv("TQGGUF_SDIST", str(tmp_path / "nope.tar.gz"))
    with pytest.raises(SourceError, match=r"TQGGUF_SDIST=.*nope.tar.gz does not exist.*unset it to fetch"):
        source.fetch_sdist(log=lambda m: None)


def test_a_python_without_pip_is_a_clear_error(offline, tmp_path, monkeypatch):
    venv = tmp_path / "nopip"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    assert subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True).returncode != 0
    offline(make_index(tmp_path / "idx", {"x.tar.gz": b"x"}))
    monkeypatch.setattr(sys, "executable", str(python))
    with pytest.raises(SourceError) as e:
        source.fetch_sdist(log=lambda m: None)
    assert f"pip is not installed for {python}" in str(e.value) and "TQGGUF_SDIST=PATH" in str(e.value)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    with pytest.raises(SourceError, match="could not run pip to fetch.*no-such-python"):
        source.fetch_sdist(log=lambda m: None)


def test_an_unwritable_cache_is_a_clear_error(offline, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TQGGUF_CACHE", str(blocker))
    with pytest.raises(SourceError, match="cannot write the sdist cache .*a-file/sdist.*TQGGUF_CACHE"):
        source.fetch_sdist(log=lambda m: None)


def test_pip_is_asked_for_the_sdist_of_the_pin_only():
    cmd = source.pip_download_command(Path("/d"))
    assert cmd[:3] == [sys.executable, "-m", "pip"] and cmd[-1] == f"{PIN.package}=={PIN.version}"
    assert {"download", "--no-deps", "--no-build-isolation"} <= set(cmd)
    assert cmd[cmd.index("--no-binary") + 1] == ":all:" and cmd[cmd.index("-d") + 1] == "/d"


def test_the_fetched_sdist_unpacks_to_the_pinned_tree(real_sdist):
    with tarfile.open(real_sdist) as tf:
        names = tf.getnames()
    assert f"{PIN.tree_name}/pyproject.toml" in names
    assert f"{PIN.tree_name}/vendor/llama.cpp/ggml/include/ggml.h" in names
