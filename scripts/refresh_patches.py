#!/usr/bin/env python3
"""Rewrite patches/*.patch from an edited dev tree (see scripts/dev_tree.py).

    python scripts/refresh_patches.py DIR [--new NAME.patch]

Each patch in patches/series keeps the set of upstream files it already touches; its new
content is `git diff` of those files between the pristine upstream commit and the work
tree. Changed files that no patch covers are refused unless --new NAME.patch is given, in
which case they go into that new patch (appended to the series).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tqgguf.builder.source import native_files, patches_dir, series  # noqa: E402


def files_of(patch: Path) -> list[str]:
    return sorted(set(re.findall(r"^\+\+\+ b/(\S+)", patch.read_text(), flags=re.M)))


def main() -> int:
    args = sys.argv[1:]
    new = None
    if "--new" in args:
        i = args.index("--new")
        new = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1:
        print(__doc__)
        return 2
    tree = Path(args[0]).resolve() / "llama.cpp"
    base = subprocess.run(["git", "-C", str(tree), "rev-list", "--max-parents=0", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.split()[0]
    native = {str(p) for p in native_files()}

    def diff(paths: list[str]) -> str:
        return subprocess.run(["git", "-C", str(tree), "diff", "--no-color", "--no-ext-diff", base, "--", *paths],
                              check=True, capture_output=True, text=True).stdout

    changed = subprocess.run(["git", "-C", str(tree), "diff", "--name-only", base], check=True,
                             capture_output=True, text=True).stdout.split()
    changed = [c for c in changed if c not in native]
    covered: set[str] = set()
    for patch in series():
        paths = files_of(patch)
        covered.update(paths)
        text = diff(paths)
        if text != patch.read_text():
            patch.write_text(text)
            print(f"updated {patch.name} ({len(paths)} files)")
    uncovered = [c for c in changed if c not in covered]
    if uncovered:
        if not new:
            print("changed files not in any patch (use --new NAME.patch): " + ", ".join(uncovered), file=sys.stderr)
            return 1
        (patches_dir() / new).write_text(diff(uncovered))
        with open(patches_dir() / "series", "a") as f:
            f.write(new + "\n")
        print(f"wrote {new} ({len(uncovered)} files)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
