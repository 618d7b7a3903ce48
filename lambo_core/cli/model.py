"""`lambo model pull|import|list|verify`: the embedding models lambo runs (spec: "lambo_recall",
the vector leg). Parse, call the embed library, print.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..embed.progress import human_size
from .common import reports_errors, root_config


@click.group("model")
def model_group() -> None:
    """Fetch, register, list and check the embedding models lambo runs."""


@model_group.command("pull")
@click.argument("name", required=False)
@click.option("--force", is_flag=True, help="download again even if installed and current")
@click.pass_context
@reports_errors
def pull_cmd(ctx: click.Context, name: str | None, force: bool) -> None:
    """Download a catalog model (default: the configured one, else bge-m3).

    Resumes a cut download, checks each file's size and sha256 against the
    hub, and installs only when every file verified. Progress goes to stderr.
    """
    from ..embed.catalog import CATALOG, DEFAULT_MODEL
    from ..embed.download import pull_model

    config = root_config(ctx)
    if name is None:
        configured = str(config.get("embedder.model"))
        name = configured if configured in CATALOG else DEFAULT_MODEL
    path = pull_model(
        name, config.paths.models_dir, str(config.get("embedder.hub_url")), True, force=force
    )
    click.echo(f"{name}: installed in {path}")


@model_group.command("import")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--name", "name", required=True, help="the name to use in [embedder] model")
@click.option(
    "--pooling",
    type=click.Choice(["cls", "mean"]),
    help="how to pool a per-token output (default: what the directory says)",
)
@click.option("--output", "output", help="the graph output holding the embedding (name or index)")
@click.option("--model-file", help="the .onnx file to use when the directory holds several")
@click.option("--max-length", type=click.IntRange(min=2), help="token cap per text")
@click.pass_context
@reports_errors
def import_cmd(
    ctx: click.Context,
    directory: Path,
    name: str,
    pooling: str | None,
    output: str | None,
    model_file: str | None,
    max_length: int | None,
) -> None:
    """Copy a local ONNX model directory (model + tokenizer.json) into lambo's cache."""
    from ..embed.importer import import_model
    from ..embed.manifest import ModelManifest

    config = root_config(ctx)
    path = import_model(
        directory,
        name,
        config.paths.models_dir,
        pooling,
        output,
        model_file=model_file,
        max_length=max_length,
    )
    manifest = ModelManifest.read(path)
    click.echo(
        f"{name}: imported ({manifest.dim}-d, {manifest.quantization}, pooling "
        f"{manifest.pooling}, output {manifest.output}); use it with [embedder] model = "
        f"{json.dumps(name)}"
    )


@model_group.command("list")
@click.pass_context
@reports_errors
def list_cmd(ctx: click.Context) -> None:
    """Installed models with their size and embedding contract."""
    from ..embed.installed import list_models

    config = root_config(ctx)
    models = list_models(config.paths.models_dir)
    configured = str(config.get("embedder.model"))
    if not models:
        click.echo("no models installed; `lambo model pull` downloads bge-m3")
        return
    for m in models:
        mark = "*" if m.name == configured else " "
        if m.problem is not None:
            click.echo(f"{mark} {m.name}  {human_size(m.size)}  broken: {m.problem}")
            continue
        click.echo(
            f"{mark} {m.name}  {human_size(m.size)}  {m.quantization}  {m.source}  "
            f"contract {json.dumps(m.contract)}"
        )


@model_group.command("verify")
@click.argument("name", required=False)
@click.option("--no-hash", is_flag=True, help="skip re-hashing the files")
@click.pass_context
@reports_errors
def verify_cmd(ctx: click.Context, name: str | None, no_hash: bool) -> None:
    """Check a model's files, load it, embed a probe text; print contract and timing."""
    from ..embed.verify import verify_model

    config = root_config(ctx)
    target = name or str(config.get("embedder.model"))
    report = verify_model(
        target,
        config.paths.models_dir,
        threads=int(config.get("embedder.threads")),
        check_files=not no_hash,
    )
    click.echo(f"model:        {report.name}")
    click.echo(f"contract:     {json.dumps(report.contract)}")
    click.echo(f"quantization: {report.quantization}")
    click.echo(f"files:        {report.files_checked} checked against their sha256")
    click.echo(f"feeds:        {', '.join(report.feeds)}; output {report.output}")
    click.echo(
        f"max length:   {report.max_length} tokens; merge threshold {report.merge_threshold}"
    )
    click.echo(f"threads:      {report.threads}")
    click.echo(
        f"timing:       load {report.load_seconds:.2f} s, first embed "
        f"{report.first_embed_ms:.1f} ms, then {report.embed_ms:.1f} ms (median of 5)"
    )
    for note in report.notes:
        click.echo(f"note:         {note}")
