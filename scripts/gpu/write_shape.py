#!/usr/bin/env python3
"""Write a random-weight GGUF of a real model's shape (tqgguf/shapes.py), speed only.

    PYTHONPATH=<repo root> python3 scripts/gpu/write_shape.py llama-3.1-8b /tmp/l8b.gguf
    ... write_shape.py llama-3.1-70b-slice /tmp/s.gguf --layers 4 --weights q8_0
    ... write_shape.py llama-3.1-8b /tmp/l8b-v32k.gguf --vocab 32000

Needs numpy and gguf only (no click, pydantic, ...): for the GPU machine, where the files
are written next to the engine instead of being copied there. Unknown name or weight type:
the allowed ones and exit 2.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tqgguf import shapes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", help=f"one of: {', '.join(shapes.SHAPES)}")
    ap.add_argument("path", type=Path, help="the .gguf to write (replaced when it exists)")
    ap.add_argument("--layers", type=int, default=None, help="layer count (default: the shape's)")
    ap.add_argument("--weights", default="q4_0", help=f"2-D weight type: {', '.join(shapes.WEIGHT_TYPES)} (default q4_0)")
    ap.add_argument("--vocab", type=int, default=None, help="vocabulary size (default: the shape's)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    try:
        out = shapes.write_shape(args.name, args.path, weight_type=args.weights, n_layers=args.layers,
                                 n_vocab=args.vocab)
    except shapes.ShapeError as e:
        ap.error(str(e))  # exit 2
    except OSError as e:
        print(f"write_shape: cannot write {args.path}: {e}", file=sys.stderr)
        return 1
    print(f"{out}: {out.stat().st_size / 1e9:.2f} GB in {time.monotonic() - t0:.1f} s "
          f"({shapes.SPEED_ONLY_NAME})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
