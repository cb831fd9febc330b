#!/usr/bin/env python3
"""Make an editable git work tree of the patched llama.cpp, for changing upstream files.

    python scripts/maintain/dev_tree.py DIR         # DIR/llama.cpp: pinned upstream commit + patches/series
    (edit files under DIR/llama.cpp, build there as you like)
    python scripts/maintain/refresh_patches.py DIR  # rewrite patches/*.patch from your edits

The pristine upstream state is the first commit; every patch of the series is one more
commit, so `git diff`, `git log -p` and `git rebase -i` work as usual. native/ files are
symlinked into the tree, so editing them edits the repository's copies.
"""
from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tqgguf.builder.source import PIN, fetch_sdist, native_dir, native_files, series  # noqa: E402


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True, text=True).stdout


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = Path(sys.argv[1]).resolve()
    tree = out / "llama.cpp"
    if tree.exists():
        print(f"{tree} exists; remove it first", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    prefix = f"{PIN.tree_name}/vendor/llama.cpp/"
    with tarfile.open(fetch_sdist()) as tf:
        members = []
        for m in tf.getmembers():
            if m.name.startswith(prefix) and "/.git" not in m.name[len(prefix) - 1:]:
                m.name = m.name[len(prefix):]
                members.append(m)
        tree.mkdir()
        tf.extractall(tree, members=members)
    git(tree, "init", "-q")
    git(tree, "add", "-A")
    git(tree, "-c", "user.name=tqgguf", "-c", "user.email=tqgguf@localhost", "commit", "-qm",
        f"upstream llama.cpp {PIN.llama_cpp_commit} ({PIN.package} {PIN.version})")
    for patch in series():
        subprocess.run(["patch", "-p1", "--batch", "-d", str(tree), "-i", str(patch)], check=True, capture_output=True)
        git(tree, "add", "-A")
        git(tree, "-c", "user.name=tqgguf", "-c", "user.email=tqgguf@localhost", "commit", "-qm", patch.name)
    excludes = tree / ".git" / "info" / "exclude"
    with open(excludes, "a") as f:
        for rel in native_files():
            dst = tree / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to(native_dir() / rel)
            f.write(f"/{rel}\n")
    print(f"dev tree ready: {tree} ({len(series())} patches applied, {len(native_files())} native files linked)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
