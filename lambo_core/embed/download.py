"""`lambo model pull`: fetch a catalog model from a hub, check every byte, install it.

Two public hub endpoints, spoken with urllib: the listing of a pinned commit
(``GET {base}/api/models/{repo}/revision/{rev}?blobs=true``, each file's size and
sha256 or git blob id) and the file itself (``GET {base}/{repo}/resolve/{commit}/
{path}``, resumed with ``Range`` from a ``.part`` file). The base URL is
``[embedder] hub_url`` (``LAMBO_HUB_URL``), so tests run this against a local
server. Nothing is installed until every file verified (``install_dir.py``).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import re
import shutil
import socket
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..errors import ConfigError, DownloadError, ParameterError
from ..version import __version__
from .catalog import CATALOG, CatalogFile, CatalogModel
from .graph_scan import scan_onnx
from .infer import read_json
from .install_dir import exclusive, file_hashes, install_dir
from .manifest import MANIFEST_NAME, FileRecord, ModelManifest, VisionTower
from .preprocess import read_preprocessor
from .progress import NoProgress, Progress

log = logging.getLogger("lambo.embed")

USER_AGENT = f"lambo/{__version__}"
CHUNK = 1 << 20


class ModelFetchError(DownloadError):
    """A download that failed or did not verify; nothing was installed.

    A hub that answers but does not hold what the catalog names (a wrong
    ``[embedder] hub_url``) is a ``ConfigError`` instead.
    """


def _shown_url(url: str) -> str:
    """A hub URL as a message may show it: no user:password, query or fragment."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port is None else f"{host}:{port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _why(exc: BaseException) -> str:
    """A network failure in words (the exception itself goes to the log as the detail)."""
    reason: object = getattr(exc, "reason", exc)  # URLError wraps the socket's error
    if isinstance(reason, TimeoutError):
        return "timed out"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, ConnectionResetError):
        return "connection reset"
    if isinstance(reason, socket.gaierror):
        return "host name not found"
    if isinstance(reason, ssl.SSLCertVerificationError):
        return "its TLS certificate did not verify"
    if isinstance(reason, ssl.SSLError):
        return "the TLS handshake failed"
    if isinstance(reason, http.client.HTTPException):
        return "the answer was not valid HTTP"
    if isinstance(reason, OSError) and reason.strerror:
        return str(reason.strerror).lower()
    return "network error"


def _offline(name: str) -> str:
    return f"or install a local copy offline with `lambo model import DIR --name {name}`"


def _retry(name: str) -> str:
    """The next step after a network or transfer failure."""
    return (
        f"check the network and `[embedder] hub_url` (LAMBO_HUB_URL), then run "
        f"`lambo model pull {name}` again, {_offline(name)}"
    )


def _wrong_hub(name: str) -> str:
    """The next step when the hub answers but does not hold what the catalog names."""
    return (
        "check that `[embedder] hub_url` (LAMBO_HUB_URL) names a Hugging Face hub, or a "
        f"mirror of it that holds this model, {_offline(name)}"
    )


@dataclass(frozen=True)
class RemoteFile:
    """One file to fetch, with the size and checksum the hub lists for it."""

    spec: CatalogFile
    commit: str
    url: str
    size: int
    sha256: str | None  # LFS files
    git_sha1: str | None  # files kept in plain git: the blob id

    @property
    def label(self) -> str:
        return f"{self.spec.local} ({self.spec.repo}/{self.spec.path})"

    @property
    def key(self) -> str:
        """Content address of the file, so a stale .part of other bytes is never resumed."""
        return self.sha256 or self.git_sha1 or "unknown"

    def record(self) -> dict[str, Any]:
        return {
            "repo": self.spec.repo,
            "revision": self.spec.revision,
            "commit": self.commit,
            "path": self.spec.path,
            "local": self.spec.local,
            "size": self.size,
            "sha256": self.sha256,
            "git_sha1": self.git_sha1,
        }


def _request(url: str, headers: dict[str, str] | None = None) -> urllib.request.Request:
    return urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **(headers or {})})


def _listing(base_url: str, repo: str, revision: str, timeout: float, name: str) -> dict[str, Any]:
    url = (
        f"{base_url}/api/models/{urllib.parse.quote(repo, safe='/')}"
        f"/revision/{urllib.parse.quote(revision, safe='')}?blobs=true"
    )
    hub = _shown_url(base_url)
    try:
        with urllib.request.urlopen(_request(url), timeout=timeout) as resp:
            data = json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code in (404, 410):
            raise ConfigError(
                f"the hub at {hub} has no model {repo} at revision {revision} (HTTP "
                f"{exc.code}), so nothing was downloaded; {_wrong_hub(name)}"
            ) from None
        if exc.code in (401, 403):
            raise ConfigError(
                f"the hub at {hub} refused to list {repo} (HTTP {exc.code}: it is private or "
                f"gated there), so nothing was downloaded; {_wrong_hub(name)}"
            ) from None
        raise ModelFetchError(
            f"the hub at {hub} answered HTTP {exc.code} to the listing of {repo}, so nothing "
            f"was downloaded; {_retry(name)}"
        ) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise ModelFetchError(
            f"could not reach the hub at {hub} ({_why(exc)}), so nothing was downloaded; "
            f"{_retry(name)}",
            detail=repr(exc),
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise ConfigError(
            f"the hub at {hub} answered the listing of {repo} with something that is not a "
            f"hub's listing, so nothing was downloaded; {_wrong_hub(name)}"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("siblings"), list):
        raise ConfigError(
            f"the hub at {hub} answered the listing of {repo} without its list of files, so "
            f"nothing was downloaded; {_wrong_hub(name)}"
        )
    return data


def _plan(entry: CatalogModel, base_url: str, timeout: float, name: str) -> list[RemoteFile]:
    listings: dict[tuple[str, str], dict[str, Any]] = {}
    plan: list[RemoteFile] = []
    hub = _shown_url(base_url)
    for spec in entry.files:
        where = (spec.repo, spec.revision)
        if where not in listings:
            listings[where] = _listing(base_url, spec.repo, spec.revision, timeout, name)
        listing = listings[where]
        sibling = next(
            (
                s
                for s in listing["siblings"]
                if isinstance(s, dict) and s.get("rfilename") == spec.path
            ),
            None,
        )
        if sibling is None:
            raise ConfigError(
                f"the hub at {hub} lists no file {spec.path} in {spec.repo} at revision "
                f"{spec.revision}, so nothing was downloaded; {_wrong_hub(name)}"
            )
        lfs = sibling.get("lfs") if isinstance(sibling.get("lfs"), dict) else None
        size = lfs.get("size") if lfs else sibling.get("size")
        sha256 = lfs.get("sha256") if lfs else None
        blob = sibling.get("blobId") if not lfs else None
        if not isinstance(size, int) or size < 0:
            raise ConfigError(
                f"the hub at {hub} lists no size for {spec.path} in {spec.repo}, so it cannot "
                f"be verified and nothing was downloaded; {_wrong_hub(name)}"
            )
        if not (isinstance(sha256, str) and re.fullmatch(r"[0-9a-f]{64}", sha256)):
            sha256 = None
        if not (isinstance(blob, str) and re.fullmatch(r"[0-9a-f]{40}", blob)):
            blob = None
        if sha256 is None and blob is None:
            raise ConfigError(
                f"the hub at {hub} lists no checksum for {spec.path} in {spec.repo}, so it "
                f"cannot be verified and nothing was downloaded; {_wrong_hub(name)}"
            )
        commit = listing.get("sha")
        commit = commit if isinstance(commit, str) and commit else spec.revision
        url = (
            f"{base_url}/{urllib.parse.quote(spec.repo, safe='/')}/resolve/"
            f"{urllib.parse.quote(commit, safe='')}/{urllib.parse.quote(spec.path, safe='/')}"
        )
        plan.append(RemoteFile(spec, commit, url, size, sha256, blob))
    return plan


class _Cut(Exception):
    """The transfer stopped early; the .part keeps what arrived."""

    def __init__(self, have: int, why: str) -> None:
        super().__init__(why)
        self.have = have
        self.why = why


def _download(
    remote: RemoteFile, part: Path, progress: Progress, timeout: float, name: str
) -> None:
    """Fetch ``remote`` into ``part``, resuming from its current length with Range."""
    have = part.stat().st_size if part.exists() else 0
    if have > remote.size:
        part.unlink()
        have = 0
    progress.begin(have)
    if have == remote.size:
        return
    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        resp = urllib.request.urlopen(_request(remote.url, headers), timeout=timeout)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 416:  # our offset is past what the server has: start over
            part.unlink(missing_ok=True)
            raise _Cut(0, "the server refused the resume offset") from None
        raise ModelFetchError(
            f"the download of {remote.label} failed: the hub answered HTTP {exc.code}, and "
            f"nothing was installed; {_retry(name)}"
        ) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise _Cut(have, f"could not connect: {_why(exc)}") from None
    with resp:
        if have:
            match = re.match(r"bytes (\d+)-", resp.headers.get("Content-Range", ""))
            if resp.status != 206 or match is None or int(match.group(1)) != have:
                have = 0  # the server sent the whole file (or another range): rewrite it
        with part.open("r+b" if part.exists() else "wb") as fh:
            fh.seek(have)
            fh.truncate()
            try:
                while True:
                    chunk = resp.read(CHUNK)
                    if not chunk:
                        break
                    fh.write(chunk)
                    have += len(chunk)
                    progress.update(have)
            except (OSError, http.client.HTTPException) as exc:
                raise _Cut(have, f"the connection dropped: {_why(exc)}") from None
            finally:
                fh.flush()
                os.fsync(fh.fileno())
    if have < remote.size:
        raise _Cut(have, "the server closed the transfer early")


def _mismatch_step(name: str) -> str:
    return (
        f"run `lambo model pull {name}` again; if it fails the same way, something between "
        "here and the hub (a proxy, or the mirror `[embedder] hub_url` names) serves other "
        f"bytes than the hub lists: check it, {_offline(name)}"
    )


def _check(remote: RemoteFile, path: Path, name: str) -> str:
    """Size and checksum against the hub's listing; a bad file is deleted. Returns its sha256."""
    size = path.stat().st_size
    if size != remote.size:
        path.unlink()
        raise ModelFetchError(
            f"{remote.label}: {size} bytes arrived but the hub lists {remote.size}; the "
            f"download was deleted and nothing was installed; {_mismatch_step(name)}"
        )
    sha256, sha1 = file_hashes(path, size)
    if remote.sha256 is not None and sha256 != remote.sha256:
        kind, want, got = "sha256", remote.sha256, sha256
    elif remote.sha256 is None and remote.git_sha1 is not None and sha1 != remote.git_sha1:
        kind, want, got = "git blob sha1", remote.git_sha1, sha1
    else:
        return sha256
    path.unlink()
    raise ModelFetchError(
        f"{remote.label}: checksum mismatch, its {kind} is {got[:16]}… but the hub lists "
        f"{want[:16]}…; the download was deleted and nothing was installed; "
        f"{_mismatch_step(name)}"
    )


def _check_weights(
    entry: CatalogModel, fetched: Callable[[str], Path], locals_: set[str], name: str
) -> None:
    """Every graph's external weights are among the files fetched."""
    graphs = [entry.model_file] + ([entry.vision.model_file] if entry.vision else [])
    for graph in graphs:
        unfetched = sorted(scan_onnx(fetched(graph)).external_data - locals_)
        if unfetched:
            raise ModelFetchError(
                f"{graph} keeps weights in {', '.join(unfetched)}, which the catalog "
                f"entry {name} does not fetch; nothing was installed"
            )


def _vision_tower(
    entry: CatalogModel, fetched: Callable[[str], Path], name: str
) -> VisionTower | None:
    """A two-tower entry's vision tower, its preprocessing read from the file fetched: one
    that says other than the catalog is refused (other pixels would be other vectors)."""
    vision = entry.vision
    if vision is None:
        return None
    where = f"{vision.preprocessor_file} of {name}"
    read = read_preprocessor(read_json(fetched(vision.preprocessor_file)), where)
    if read.preprocess != vision.preprocess:
        raise ModelFetchError(
            f"{where}, as fetched, asks for other preprocessing than lambo's catalog "
            f"records for {name}, so nothing was installed; {_wrong_hub(name)}"
        )
    return VisionTower(vision.model_file, vision.input, vision.output, read.preprocess)


def pull_model(
    name: str,
    models_dir: Path,
    base_url: str,
    progress: bool = True,
    *,
    force: bool = False,
    retries: int = 3,
    retry_wait: float = 1.0,
    timeout: float = 60.0,
    catalog: dict[str, CatalogModel] | None = None,
    stream: IO[str] | None = None,
) -> Path:
    """Download catalog model ``name`` into ``models_dir/name`` and return that directory.

    Resumes ``.part`` files left by an earlier cut (and retries a cut
    ``retries`` times within this call), checks each file's size and checksum
    against the hub's listing, and installs only when every file verified.
    An installed copy whose files match the listing is left alone unless
    ``force``.
    """
    entries = CATALOG if catalog is None else catalog
    entry = entries.get(name)
    if entry is None:
        raise ParameterError(
            f"no catalog model is called {name}; the catalog has {', '.join(sorted(entries))} "
            "(use `lambo model import` for a model of your own)"
        )
    base = base_url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ConfigError("embedder.hub_url must start with http:// or https://")
    out = stream if stream is not None else sys.stderr
    target = models_dir / name
    with exclusive(models_dir, name):
        plan = _plan(entry, base, timeout, name)
        records = [r.record() for r in plan]
        if not force and (target / MANIFEST_NAME).is_file():
            with contextlib.suppress(ConfigError):
                current = ModelManifest.read(target)
                if current.source.get("files") == records and all(
                    (target / r.spec.local).is_file()
                    and (target / r.spec.local).stat().st_size == r.size
                    for r in plan
                ):
                    if progress:
                        out.write(f"{name} is already installed and matches the hub\n")
                    return target
        staging = models_dir / f".pull-{name}"
        staging.mkdir(parents=True, exist_ok=True)
        digests: dict[str, str] = {}
        for remote in plan:
            done = staging / remote.key
            if done.exists():  # verified by an earlier, interrupted pull: check again
                with contextlib.suppress(ModelFetchError):
                    digests[remote.spec.local] = _check(remote, done, name)
                    continue
            part = staging / f"{remote.key}.part"
            bar: Progress = (
                Progress(remote.spec.local, remote.size, out) if progress else NoProgress()
            )
            for attempt in range(retries + 1):
                try:
                    _download(remote, part, bar, timeout, name)
                    break
                except _Cut as cut:
                    pct = cut.have * 100 // remote.size if remote.size else 0
                    if attempt == retries:
                        bar.finish()
                        raise ModelFetchError(
                            f"the download of {remote.label} stopped at {pct}% ({cut.why}) "
                            "and nothing was installed; check the network and `[embedder] "
                            f"hub_url` (LAMBO_HUB_URL), then run `lambo model pull {name}` "
                            f"again to resume from there, {_offline(name)}"
                        ) from None
                    bar.note(f"{remote.spec.local}: {cut.why} at {pct}%; resuming")
                    time.sleep(retry_wait * (2**attempt))
            bar.finish()
            digests[remote.spec.local] = _check(remote, part, name)
            os.replace(part, done)

        def fetched(local: str) -> Path:
            return staging / next(r.key for r in plan if r.spec.local == local)

        _check_weights(entry, fetched, {r.spec.local for r in plan}, name)
        scan = scan_onnx(fetched(entry.model_file))
        tower = _vision_tower(entry, fetched, name)
        if scan.quantization != entry.quantization:
            log.warning(
                "model %s: the catalog says %s but its graph is %s",
                name,
                entry.quantization,
                scan.quantization,
            )
        manifest = ModelManifest(
            name=entry.name,
            model_file=entry.model_file,
            tokenizer_file=entry.tokenizer_file,
            pooling=entry.pooling,
            output=entry.output,
            dim=entry.dim,
            max_length=entry.max_length,
            token_type_ids=entry.token_type_ids,
            pad_id=entry.pad_id,
            pad_token=entry.pad_token,
            merge_threshold=entry.merge_threshold,
            quantization=scan.quantization,
            files={r.spec.local: FileRecord(r.size, digests[r.spec.local]) for r in plan},
            source={"kind": "catalog", "hub": base, "files": records},
            vision=tower,
        )
        tmp = models_dir / f".install-{name}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            moved: dict[str, Path] = {}
            for remote in plan:
                dest = tmp / remote.spec.local
                dest.parent.mkdir(parents=True, exist_ok=True)
                if remote.key in moved:  # two names, one content
                    shutil.copyfile(moved[remote.key], dest)
                else:
                    os.replace(staging / remote.key, dest)
                    moved[remote.key] = dest
            manifest.write(tmp)
            install_dir(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
    return target
