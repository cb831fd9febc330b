"""Terminal output that verbs share: the narrow-terminal layout of their listings."""
from __future__ import annotations

import textwrap

from rich.console import Console

#: terminal columns below which ``env`` and ``models list`` print one block per entry instead
#: of a table (a five- or six-column table folds names like OLLAMA_KV_CACHE_TYPE mid-word)
NARROW = 120


def print_indented(console: Console, text: str, style: str = "") -> None:
    """``text`` wrapped between words to the console's width, every line indented by four
    spaces (rich's own wrapping does not indent continuation lines); printed literally (no
    markup), in ``style``."""
    lines = textwrap.fill(text, width=max(console.width, 40), initial_indent="    ", subsequent_indent="    ",
                          break_long_words=False, break_on_hyphens=False)
    console.print(lines, style=style, markup=False, highlight=False, soft_wrap=True)
