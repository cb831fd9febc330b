#!/usr/bin/env python3
"""Rewrite patches/*.patch from an edited dev tree (see scripts/maintain/dev_tree.py).

    python scripts/maintain/refresh_patches.py DIR [--new NAME.patch]
    python scripts/maintain/refresh_patches.py DIR --from-commits

Each patch in patches/series keeps the set of upstream files it already touches; its new
content is `git diff` of those files between the pristine upstream commit and the work
tree. Changed files that no patch covers are refused unless --new NAME.patch is given, in
which case they go into that new patch (appended to the series). That mode needs every
upstream file to belong to one patch; it refuses a series where two patches touch the same
file (e.g. 0005 and 0009 both hook src/llama-kv-cache.cpp).

--from-commits: the dev tree holds one commit per patch, named by the patch file (as
dev_tree.py makes it); commit your edits into the right commit (git commit --fixup +
git rebase -i --autosquash), or as a new commit named NNNN-name.patch for a new patch, and
each patch is rewritten as the diff of its own commit (native/ files left out). Patches in
the series with no commit, or commits not named *.patch, are refused.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tqgguf.builder.source import native_files, patches_dir, series  # noqa: E402


def files_of(patch: Path) -> list[str]:
    return sorted(set(re.findall(r"^\+\+\+ b/(\S+)", patch.read_text(), flags=re.M)))


def main() -> int:
    args = sys.argv[1:]
    new = None
    from_commits = "--from-commits" in args
    if from_commits:
        args.remove("--from-commits")
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

    if from_commits:
        return refresh_from_commits(tree, base, native)
    owners: dict[str, list[str]] = {}
    for patch in series():
        for f in files_of(patch):
            owners.setdefault(f, []).append(patch.name)
    shared = {f: names for f, names in owners.items() if len(names) > 1}
    if shared:
        print("these files are touched by more than one patch, so a work-tree diff cannot be split between "
              "them: " + "; ".join(f"{f} ({', '.join(n)})" for f, n in sorted(shared.items()))
              + ". Commit your edits into the patch commits and use --from-commits.", file=sys.stderr)
        return 1
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


def refresh_from_commits(tree: Path, base: str, native: set[str]) -> int:
    """Rewrite every patch as the diff of its commit in the dev tree (see the docstring)."""
    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(tree), *a], check=True, capture_output=True, text=True).stdout

    if git("status", "--porcelain", "--untracked-files=no").strip():
        print("the dev tree has uncommitted edits; commit them into the patch commits first", file=sys.stderr)
        return 1
    commits = [ln.split(" ", 1) for ln in git("log", "--reverse", "--format=%H %s", f"{base}..HEAD").splitlines()]
    names = [p.name for p in series()]
    bad = [s for _, s in commits if not s.endswith(".patch")]
    missing = [n for n in names if n not in {s for _, s in commits}]
    if bad or missing:
        print("commits not named *.patch: " + ", ".join(bad) if bad else
              "patches of the series without a commit: " + ", ".join(missing), file=sys.stderr)
        return 1
    for h, name in commits:
        files = [f for f in git("diff", "--name-only", f"{h}^", h).split() if f not in native]
        text = git("diff", "--no-color", "--no-ext-diff", f"{h}^", h, "--", *files) if files else ""
        path = patches_dir() / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {name} ({len(files)} files)")
        if name not in names:
            with open(patches_dir() / "series", "a") as f:
                f.write(name + "\n")
            names.append(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
