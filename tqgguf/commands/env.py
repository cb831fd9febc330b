"""``tqgguf env``: every setting, its value and where it came from (thin layer over tqgguf.config)."""
from __future__ import annotations

import json
import os

import click
from rich.console import Console
from rich.table import Table

from ..config import SettingsError, resolve_settings, settings_report


@click.command(name="env")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def command(as_json: bool) -> None:
    """Show every setting, its value and its source (flag, variable or default), and
    every environment variable tqgguf reads.

    Precedence: CLI flag > TQGGUF_* > OLLAMA_* > default. A bad value is an error naming
    the variable, the value and what is allowed (exit status 2)."""
    try:
        settings = resolve_settings({}, os.environ)
    except SettingsError as e:
        if as_json:
            click.echo(json.dumps({"errors": e.errors}, indent=2))
        else:
            for msg in e.errors:
                click.echo(f"error: {msg}", err=True)
        raise SystemExit(2) from None
    report = settings_report(settings, os.environ)
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
        return
    console = Console()
    t = Table(title="Settings (CLI flag > TQGGUF_* > OLLAMA_* > default)", title_justify="left")
    for col in ("setting", "value", "source", "flag", "variables", "description"):
        t.add_column(col, overflow="fold")
    for name, row in report["settings"].items():
        src = row["source_text"]
        if row["source"]["kind"] != "default":
            src += f"={row['source']['raw']!r}"
        t.add_row(name, row["display"], src, ", ".join(row["flags"]) or "-", ", ".join(row["env"]),
                  row["description"])
    console.print(t)
    v = Table(title="Environment variables", title_justify="left")
    for col in ("variable", "value", "description"):
        v.add_column(col, overflow="fold")
    for name, row in report["variables"].items():
        v.add_row(name, "-" if row["value"] is None else repr(row["value"]), row["description"])
    console.print(v)
    for name, near in report["did_you_mean"].items():
        hint = f"; did you mean {near}?" if near else ""
        console.print(f"[yellow]warning:[/yellow] {name} is set but tqgguf does not read it (typo?){hint}",
                      highlight=False)
