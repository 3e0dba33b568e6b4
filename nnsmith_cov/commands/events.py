"""How a campaign's events (new findings, duplicates, internal errors) are printed, by `fuzz`
and `replay` alike."""

from __future__ import annotations

from typing import Any


def print_event(console: Any, event: tuple[str, Any, Any]) -> None:
    kind, what, bundle = event
    if kind == "internal":  # the first of each signature; the rest are counted on the status screen
        if bundle:
            console.print(f"[yellow]internal error[/] (ours, not a finding): {what.signature} -> {bundle}")
    elif kind == "fault":
        console.print(f"[yellow]internal fault[/] (see the worker log): {what}")
    elif kind == "new":
        where = f" (localized: {what.localized})" if what.localized else ""
        console.print(f"[bold red]new[/] {what.symptom} {what.backend}/{what.stage}/{what.opt}{where}: {what.detail}")
        console.print(f"    -> {bundle}")
    else:
        console.print(f"[dim]dup {what.signature[:140]}[/]")
