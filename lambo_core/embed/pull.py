"""Installing models: pull from a hub, import a local directory, list, verify, resolve.

Every installed model is one plain directory ``<models_dir>/<name>/`` holding
its files and ``lambo-model.json``. It appears whole or not at all: files are
gathered in a hidden directory beside it, each checked, then moved into place
with one ``os.replace``.

Why not ``huggingface_hub`` (it comes with ``tokenizers``)? We looked at it
(2.4.0) and it does not serve here:

- it verifies sizes and etags, but never hashes freshly downloaded bytes
  against the sha256 the hub lists (the hash is only computed to re-validate
  a file already on disk), and we must refuse a corrupt download;
- it keeps files in its own cache layout (blobs plus snapshot symlinks, or a
  ``local_dir`` with its own metadata), while lambo installs one directory,
  atomically, from files of two repositories (bge-m3's model and tokenizer);
- with ``hf_xet`` installed, large files may move through the Xet protocol,
  which a test server cannot imitate, and its HEAD handshake needs
  hub-specific headers (X-Repo-Commit, X-Linked-Etag, X-Linked-Size);
- its progress is tqdm, which redraws one line with carriage returns and shows
  nothing useful in a log.

So this module speaks the two public hub endpoints itself with urllib:
``GET {base}/api/models/{repo}/revision/{rev}?blobs=true`` (each sibling's
``size``, git ``blobId`` and, for LFS files, ``lfs.sha256``) and
``GET {base}/{repo}/resolve/{commit}/{path}`` with ``Range`` to resume a
``.part`` file. The base URL is ``[embedder] hub_url`` (``LAMBO_HUB_URL``), so
tests run this code against a local server.

``import_model`` copies (never links or records a path to) the directory it
is given: the cache then holds everything `lambo model list` shows, and
moving or editing the source cannot change what a session's contract names.
"""

from __future__ import annotations

import contextlib
import hashlib
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .. import __version__
from ..errors import ConfigError, ConflictError, DownloadError, ParameterError
from .base import EmbeddingContract
from .catalog import CATALOG, CatalogFile, CatalogModel
from .onnx import MANIFEST_NAME, FileRecord, ModelManifest, OnnxEmbedder, scan_onnx

if TYPE_CHECKING:
    from ..config import Config

log = logging.getLogger("lambo.embed")

USER_AGENT = f"lambo/{__version__}"
CHUNK = 1 << 20
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
NAME_RULE = (
    "must be 1 to 64 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"
)


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


# --------------------------------------------------------------------------- progress


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


class Progress:
    """A progress bar on a stream. On a terminal it redraws one line (at most
    ten times a second); elsewhere (a log, a pipe, CI) it prints a line each
    time another 10% is done, so the output stays readable."""

    def __init__(self, label: str, total: int, stream: IO[str], *, tty: bool | None = None) -> None:
        self.label = label
        self.total = max(total, 0)
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self._last_step = -1
        self._last_draw = 0.0
        self._drawn = False

    def _pct(self, done: int) -> int:
        return 100 if self.total == 0 else min(100, done * 100 // self.total)

    def begin(self, done: int) -> None:
        if done:
            self.note(f"resuming {self.label} at {self._pct(done)}% ({_human(done)})")
        self.update(done, force=True)

    def update(self, done: int, *, force: bool = False) -> None:
        pct = self._pct(done)
        if self.tty:
            now = time.monotonic()
            if force or done >= self.total or now - self._last_draw >= 0.1:
                filled = pct * 30 // 100
                bar = "#" * filled + "." * (30 - filled)
                self.stream.write(
                    f"\r{self.label} [{bar}] {pct:3d}% {_human(done)}/{_human(self.total)}"
                )
                self.stream.flush()
                self._last_draw = now
                self._drawn = True
            return
        step = pct // 10
        if step > self._last_step:
            self._last_step = step
            self.stream.write(f"{self.label}: {pct:3d}% ({_human(done)} of {_human(self.total)})\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        if self.tty and self._drawn:
            self.stream.write("\n")
            self._drawn = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


class _NoProgress(Progress):
    def __init__(self) -> None:
        super().__init__("", 0, sys.stderr, tty=False)

    def update(self, done: int, *, force: bool = False) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def begin(self, done: int) -> None:
        pass

    def finish(self) -> None:
        pass


# --------------------------------------------------------------------------- the hub


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


def _hashes(path: Path, size: int) -> tuple[str, str]:
    """(sha256, git blob sha1) of a file in one pass."""
    sha256 = hashlib.sha256()
    sha1 = hashlib.sha1(f"blob {size}\0".encode())
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            sha256.update(chunk)
            sha1.update(chunk)
    return sha256.hexdigest(), sha1.hexdigest()


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
    sha256, sha1 = _hashes(path, size)
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


# --------------------------------------------------------------------------- install


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _install(tmp: Path, target: Path) -> None:
    """Move a complete, synced directory into place; an older one is swapped out."""
    for item in tmp.rglob("*"):
        if item.is_file():
            with item.open("rb") as fh:
                os.fsync(fh.fileno())
    _fsync_dir(tmp)
    aside: Path | None = None
    if target.exists():
        aside = target.with_name(f".old-{target.name}-{uuid.uuid4().hex[:8]}")
        os.replace(target, aside)
    os.replace(tmp, target)
    _fsync_dir(target.parent)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def _exclusive(models_dir: Path, name: str) -> Iterator[None]:
    """One pull or import per model name at a time, across processes."""
    models_dir.mkdir(parents=True, exist_ok=True)
    lock_path = models_dir / f".lock-{name}"
    with lock_path.open("a") as fh:
        try:
            import fcntl

            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # not POSIX: no cross-process lock
            pass
        except OSError:
            raise ConflictError(
                f"another `lambo model pull` or `import` of {name} is running"
            ) from None
        yield


def _check_name(name: str, what: str) -> None:
    if not NAME_RE.fullmatch(name):
        raise ParameterError(f"{what} {NAME_RULE}")


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
    with _exclusive(models_dir, name):
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
                Progress(remote.spec.local, remote.size, out) if progress else _NoProgress()
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
        scan = scan_onnx(staging / next(r.key for r in plan if r.spec.local == entry.model_file))
        unfetched = sorted(scan.external_data - {r.spec.local for r in plan})
        if unfetched:
            raise ModelFetchError(
                f"{entry.model_file} keeps weights in {', '.join(unfetched)}, which the catalog "
                f"entry {name} does not fetch; nothing was installed"
            )
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
            _install(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
    return target


# --------------------------------------------------------------------------- import


_POOLED_OUTPUTS = ("dense_vecs", "sentence_embedding", "sentence_embeddings", "embeddings")
_TOKEN_OUTPUTS = ("last_hidden_state", "token_embeddings")


def _find_model_file(src: Path, model_file: str | None) -> Path:
    if model_file:
        path = src / model_file
        if not path.is_file():
            raise ConfigError(f"{model_file} is not a file in the directory given")
        return path
    candidates = sorted(src.glob("*.onnx")) + sorted((src / "onnx").glob("*.onnx"))
    if not candidates:
        raise ConfigError(
            "the directory given holds no .onnx model file (looked in it and in its onnx/ "
            "folder); lambo needs an ONNX export of the model"
        )
    if len(candidates) > 1:
        names = ", ".join(str(c.relative_to(src)) for c in candidates)
        raise ConfigError(f"the directory given holds several models ({names}); name one")
    return candidates[0]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _infer_pooling(src: Path) -> str | None:
    """sentence-transformers says how it pools in 1_Pooling/config.json."""
    config = _read_json(src / "1_Pooling" / "config.json")
    if config.get("pooling_mode_cls_token"):
        return "cls"
    if config.get("pooling_mode_mean_tokens"):
        return "mean"
    return None


def _infer_max_length(src: Path, tokenizer: dict[str, Any]) -> int:
    truncation = tokenizer.get("truncation")
    if isinstance(truncation, dict) and isinstance(truncation.get("max_length"), int):
        return int(truncation["max_length"])
    config = _read_json(src / "config.json")
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int) and positions > 2:
        # RoBERTa-style position ids start after the padding index.
        offset = 2 if str(config.get("model_type", "")).endswith("roberta") else 0
        return positions - offset
    return 512


def _infer_pad(tokenizer: Any, tokenizer_json: dict[str, Any]) -> tuple[int, str]:
    padding = tokenizer_json.get("padding")
    if isinstance(padding, dict):
        token, pad_id = padding.get("pad_token"), padding.get("pad_id")
        if isinstance(token, str) and tokenizer.token_to_id(token) == pad_id:
            return int(pad_id), token
    for token in ("<pad>", "[PAD]", "<|padding|>", "<|endoftext|>"):
        found = tokenizer.token_to_id(token)
        if found is not None:
            return int(found), token
    # Any id works as padding under an attention mask; keep the tokenizer's id 0.
    return 0, str(tokenizer.id_to_token(0))


def _copy_hashing(src: Path, dest: Path) -> FileRecord:
    sha256 = hashlib.sha256()
    size = 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    with src.open("rb") as fin, dest.open("wb") as fout:
        while chunk := fin.read(CHUNK):
            sha256.update(chunk)
            fout.write(chunk)
            size += len(chunk)
    return FileRecord(size, sha256.hexdigest())


def import_model(
    src_dir: Path | str,
    name: str,
    models_dir: Path,
    pooling: str | None = None,
    output: str | None = None,
    *,
    model_file: str | None = None,
    max_length: int | None = None,
    merge_threshold: float | None = None,
) -> Path:
    """Copy a local Hugging-Face-style ONNX directory into ``models_dir/name``.

    Needs one ``.onnx`` file (or ``model_file``) and ``tokenizer.json``. The
    inputs, the output and the width come from the graph; pooling from
    ``pooling``, else sentence-transformers' ``1_Pooling/config.json``, and a
    per-token output without either is refused rather than guessed. The copy
    is loaded and run on a probe text before it is installed.
    """
    import onnxruntime as ort
    from tokenizers import Tokenizer

    _check_name(name, "--name")
    if pooling is not None and pooling not in ("cls", "mean"):
        raise ParameterError("--pooling must be cls or mean")
    if merge_threshold is not None and not 0.0 < merge_threshold <= 1.0:
        raise ParameterError("merge_threshold must be in (0, 1]")
    src = Path(src_dir).expanduser()
    if not src.is_dir():
        raise ConfigError(f"{src_dir} is not a directory")
    model_path = _find_model_file(src, model_file)
    tokenizer_path = next(
        (p for p in (src / "tokenizer.json", model_path.parent / "tokenizer.json") if p.is_file()),
        None,
    )
    if tokenizer_path is None:
        raise ConfigError(
            "the directory given has no tokenizer.json; lambo needs the tokenizer in the "
            "Hugging Face `tokenizers` JSON format beside the model"
        )
    tokenizer_json = _read_json(tokenizer_path)
    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_path))
    except Exception as exc:
        raise ConfigError(
            "tokenizer.json in the directory given is not a tokenizers JSON file",
            detail=repr(exc),
        ) from None
    try:
        scan = scan_onnx(model_path)
    except (OSError, ValueError, IndexError) as exc:
        raise ConfigError(
            f"{model_path.name} in the directory given is not an ONNX model", detail=repr(exc)
        ) from None
    for location in sorted(scan.external_data):
        extra = model_path.parent / location
        if ".." in Path(location).parts or Path(location).is_absolute() or not extra.is_file():
            raise ConfigError(
                f"{model_path.name} keeps weights in {location}, which is not in the "
                "directory given"
            )
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(
            str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:
        raise ConfigError(
            f"onnxruntime could not load {model_path.name} from the directory given",
            detail=repr(exc),
        ) from None
    inputs = [i.name for i in session.get_inputs()]
    outputs = {o.name: o.shape for o in session.get_outputs()}
    if output is not None:
        chosen: str | int = int(output) if output.isdigit() else output
        if isinstance(chosen, str) and chosen not in outputs:
            raise ConfigError(
                f"--output: the model has no output {output}; it has {', '.join(outputs)}"
            )
        if isinstance(chosen, int) and chosen >= len(outputs):
            raise ConfigError(f"--output: the model has only {len(outputs)} outputs")
    else:
        chosen = next(
            (o for o in (*_POOLED_OUTPUTS, *_TOKEN_OUTPUTS) if o in outputs), next(iter(outputs))
        )
    out_name = chosen if isinstance(chosen, str) else list(outputs)[chosen]
    shape = outputs[out_name]
    per_token = shape is None or len(shape) != 2
    pooling = pooling or _infer_pooling(src)
    if pooling is None:
        if per_token:
            raise ConfigError(
                f"the model's output {out_name} is one vector per token and the directory does "
                "not say how to pool it; pass --pooling cls or --pooling mean"
            )
        pooling = "cls"  # unused: the output is already one vector per text
    dim = shape[-1] if shape and isinstance(shape[-1], int) else 0
    if not dim:  # a symbolic width: run the graph once to see it
        ids = tokenizer.encode("probe").ids
        feeds = {
            n: (
                [ids]
                if n == "input_ids"
                else [[1] * len(ids)]
                if n == "attention_mask"
                else [[0] * len(ids)]
            )
            for n in inputs
        }
        import numpy as np

        result = session.run([out_name], {k: np.array(v, dtype=np.int64) for k, v in feeds.items()})
        dim = int(result[0].shape[-1])
    del session
    pad_id, pad_token = _infer_pad(tokenizer, tokenizer_json)
    limit = max_length or _infer_max_length(src, tokenizer_json)

    models_dir.mkdir(parents=True, exist_ok=True)
    target = models_dir / name
    with _exclusive(models_dir, name):
        tmp = models_dir / f".install-{name}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            files = {
                model_path.name: _copy_hashing(model_path, tmp / model_path.name),
                "tokenizer.json": _copy_hashing(tokenizer_path, tmp / "tokenizer.json"),
            }
            for location in sorted(scan.external_data):  # checked above
                files[location] = _copy_hashing(model_path.parent / location, tmp / location)
            manifest = ModelManifest(
                name=name,
                model_file=model_path.name,
                tokenizer_file="tokenizer.json",
                pooling=pooling,
                output=chosen,
                dim=dim,
                max_length=limit,
                token_type_ids="token_type_ids" in inputs,
                pad_id=pad_id,
                pad_token=pad_token,
                # A local copy of a catalog model (the offline path) keeps its calibration.
                merge_threshold=merge_threshold
                if merge_threshold is not None
                else (CATALOG[name].merge_threshold if name in CATALOG else None),
                quantization=scan.quantization,
                files=files,
                source={"kind": "import", "model_file": str(model_path.relative_to(src))},
            )
            manifest.write(tmp)
            probe = OnnxEmbedder(tmp, threads=1, batch_size=1)
            probe.embed(["lambo import probe"])
            del probe
            _install(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


# --------------------------------------------------------------------------- list, verify


@dataclass(frozen=True)
class InstalledModel:
    name: str
    path: Path
    size: int
    contract: EmbeddingContract | None
    quantization: str
    source: str  # "catalog" | "import"
    problem: str | None = None


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def list_models(models_dir: Path) -> list[InstalledModel]:
    """Every installed model, by name; a directory with a bad manifest says what is wrong."""
    found: list[InstalledModel] = []
    if not models_dir.is_dir():
        return found
    for path in sorted(models_dir.iterdir()):
        if not path.is_dir() or path.name.startswith("."):
            continue
        try:
            manifest = ModelManifest.read(path)
        except ConfigError as exc:
            found.append(
                InstalledModel(path.name, path, _dir_size(path), None, "?", "?", exc.message)
            )
            continue
        found.append(
            InstalledModel(
                manifest.name,
                path,
                _dir_size(path),
                manifest.contract(),
                manifest.quantization,
                str(manifest.source.get("kind", "?")),
            )
        )
    return found


@dataclass(frozen=True)
class VerifyReport:
    name: str
    contract: EmbeddingContract
    quantization: str
    files_checked: int
    load_seconds: float
    first_embed_ms: float
    embed_ms: float  # median of five runs after the first
    feeds: list[str]
    output: str
    max_length: int
    threads: int
    merge_threshold: float
    notes: list[str] = field(default_factory=list)


PROBE_TEXT = "lambo verify: a short sentence to embed."


def verify_model(
    model: str, models_dir: Path, *, threads: int = 0, check_files: bool = True
) -> VerifyReport:
    """Check an installed model's files against its manifest, load it, embed a probe text."""
    import numpy as np

    path = resolve_model(model, models_dir)
    manifest = ModelManifest.read(path, model)
    checked = 0
    if check_files:
        for fname, rec in manifest.files.items():
            fpath = path / fname
            if not fpath.is_file():
                raise ConfigError(f"model {model} is missing its file {fname}")
            sha256, _ = _hashes(fpath, fpath.stat().st_size)
            if sha256 != rec.sha256 or fpath.stat().st_size != rec.size:
                raise ConfigError(
                    f"model {model}: {fname} does not match the sha256 in its manifest; pull or "
                    "import it again"
                )
            checked += 1
    started = time.perf_counter()
    embedder = OnnxEmbedder(path, threads=threads, batch_size=1)
    loaded = time.perf_counter() - started
    started = time.perf_counter()
    vector = embedder.embed([PROBE_TEXT])
    first = (time.perf_counter() - started) * 1000
    runs: list[float] = []
    for _ in range(5):
        started = time.perf_counter()
        again = embedder.embed([PROBE_TEXT])
        runs.append((time.perf_counter() - started) * 1000)
    notes: list[str] = []
    norm = float(np.linalg.norm(vector[0]))
    if abs(norm - 1.0) > 1e-3:
        raise ConfigError(f"model {model} made a vector of length {norm:.4f}, not 1")
    if float(np.dot(vector[0], again[0])) < 0.9999:
        notes.append("the same text embedded twice gave different vectors")
    if manifest.quantization == "int8-weight-only":
        notes.append("weight-only int8 (float matmuls): may be slower than a dynamic-int8 export")
    return VerifyReport(
        name=manifest.name,
        contract=embedder.contract,
        quantization=manifest.quantization,
        files_checked=checked,
        load_seconds=loaded,
        first_embed_ms=first,
        embed_ms=sorted(runs)[len(runs) // 2],
        feeds=embedder.feeds,
        output=embedder.output_name,
        max_length=embedder.max_length,
        threads=embedder.threads,
        merge_threshold=embedder.merge_threshold,
        notes=notes,
    )


# --------------------------------------------------------------------------- resolve


def _looks_like_path(value: str) -> bool:
    return "/" in value or "\\" in value or value.startswith((".", "~"))


def no_model_message(value: str) -> str:
    """The one message for a missing model, naming every way out."""
    name = value if NAME_RE.fullmatch(value) else "NAME"
    pull = f"`lambo model pull {value}`" if value in CATALOG else "`lambo model pull`"
    return (
        f"no embedding model is installed for embedder.model = {json.dumps(value)}: run {pull} "
        f"to download one, or `lambo model import DIR --name {name}` to register a local copy, "
        'or set match_strategy = "canonical" in [embedder] for keyword-only memory without an '
        "embedder"
    )


def resolve_model(value: str, models_dir: Path) -> Path:
    """A catalog or imported name, or a directory holding a manifest -> its directory."""
    value = value.strip()
    if not value:
        raise ConfigError("embedder.model is empty; " + no_model_message("bge-m3"))
    if _looks_like_path(value):
        path = Path(value).expanduser()
        if not path.is_dir():
            raise ConfigError(f"embedder.model {value} is not a directory")
        if not (path / MANIFEST_NAME).is_file():
            raise ConfigError(
                f"embedder.model {value} has no {MANIFEST_NAME}; register it with "
                f"`lambo model import {value} --name NAME` and set embedder.model to NAME"
            )
        return path
    if NAME_RE.fullmatch(value) and (models_dir / value / MANIFEST_NAME).is_file():
        return models_dir / value
    if value in CATALOG:
        raise ConfigError(no_model_message(value))
    installed = [m.name for m in list_models(models_dir) if m.problem is None]
    raise ConfigError(
        f"embedder.model {json.dumps(value)} is not a catalog model "
        f"({', '.join(sorted(CATALOG))}), an installed model "
        f"({', '.join(installed) if installed else 'none installed'}) or a directory; "
        + no_model_message(value).split(": ", 1)[1]
    )


def resolve_model_dir(config: Config) -> Path:
    """The directory of the model ``[embedder] model`` names."""
    return resolve_model(str(config.get("embedder.model")), config.paths.models_dir)
