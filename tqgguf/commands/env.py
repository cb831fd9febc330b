"""``tqgguf env``: every setting, its value and where it came from (thin layer over tqgguf.config)."""
from __future__ import annotations

import json
import os

import click
from rich.console import Console
from rich.table import Table

from ..config import SettingsError, check_listen_address, resolve_settings, settings_report
from .terminal import NARROW, print_indented


@click.command(name="env")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def command(as_json: bool) -> None:
    """Show every setting, its value and its source (flag, variable or default), and
    every environment variable tqgguf reads.

    Precedence: CLI flag > TQGGUF_* > OLLAMA_* > default. A bad value is an error naming
    the variable, the value and what is allowed (exit status 2), the same message
    ``tqgguf serve`` gives for it (a listen address that does not resolve, or is not this
    machine's, included). A set variable tqgguf does not read (a likely typo) is warned about
    on stderr before the report, as every verb does (``--json``: also its ``did_you_mean``)."""
    try:
        settings = resolve_settings({}, os.environ)
        check_listen_address(settings)
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
    if console.width < NARROW:
        _print_narrow(console, report)
        return
    t = Table(title="Settings (CLI flag > TQGGUF_* > OLLAMA_* > default)", title_justify="left")
    for col in ("setting", "value", "source", "flag", "variables", "description"):
        t.add_column(col, overflow="fold")
    for name, row in report["settings"].items():
        t.add_row(name, row["display"], _source(row), ", ".join(row["flags"]) or "-", ", ".join(row["env"]),
                  row["description"])
    console.print(t)
    v = Table(title="Environment variables", title_justify="left")
    for col in ("variable", "value", "description"):
        v.add_column(col, overflow="fold")
    for name, row in report["variables"].items():
        v.add_row(name, "-" if row["value"] is None else repr(row["value"]), row["description"])
    console.print(v)


def _source(row: dict) -> str:
    src = row["source_text"]
    if row["source"]["kind"] != "default" and not row["source"].get("auto"):
        src += f"={row['source']['raw']!r}"
    return src


def _print_narrow(console: Console, report: dict) -> None:
    """The settings and variables as blocks of short lines that wrap between words."""
    from rich.markup import escape

    def indented(text: str, style: str = "") -> None:
        print_indented(console, text, style)

    console.print("[bold]Settings[/bold] (CLI flag > TQGGUF_* > OLLAMA_* > default)\n", highlight=False)
    for name, row in report["settings"].items():
        console.print(f"[bold]{name}[/bold] = {escape(str(row['display']))}  [dim]({escape(_source(row))})[/dim]",
                      highlight=False)
        where = [f"flag {', '.join(row['flags'])}"] if row["flags"] else []
        if row["env"]:
            where.append(f"variables {', '.join(row['env'])}")
        if where:
            indented("; ".join(where))
        indented(row["description"], "dim")
    console.print("\n[bold]Environment variables[/bold]\n", highlight=False)
    for name, row in report["variables"].items():
        value = "-" if row["value"] is None else repr(row["value"])
        console.print(f"[bold]{name}[/bold] = {escape(value)}", highlight=False)
        indented(row["description"], "dim")
