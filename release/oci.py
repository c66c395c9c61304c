"""Writing an OCI image archive (``oci-archive``, as skopeo, podman and umoci read it) so that
the same inputs give the same bytes.

A layer is a tar of a root filesystem written in a fixed order with fixed metadata: names
sorted, owners as numbers only, every mtime clamped to the build's epoch, no atime or ctime,
and gzip without a file name or timestamp. Config, manifest and index are canonical JSON. The
blobs are therefore functions of the files' contents and modes alone, and so is the digest.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"

#: Mount points a container runtime fills: kept as empty directories, their contents left out.
RUNTIME_MOUNTS = ("dev", "proc", "sys", "run", "tmp")


@dataclass(frozen=True)
class Blob:
    media_type: str
    data_path: Path
    digest: str
    size: int

    def descriptor(self, **extra: Any) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size, **extra}


@dataclass(frozen=True)
class Layer:
    blob: Blob
    #: sha256 of the uncompressed tar: the image config's ``rootfs.diff_ids``.
    diff_id: str
    uncompressed_size: int


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return f"sha256:{h.hexdigest()}"


def _walk(root: Path) -> list[Path]:
    """Every path under ``root`` in a fixed order (a directory before its contents)."""
    found: list[Path] = []

    def visit(directory: Path) -> None:
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            path = Path(entry.path)
            found.append(path)
            rel = path.relative_to(root)
            if entry.is_dir(follow_symlinks=False) and not (
                    len(rel.parts) == 1 and rel.parts[0] in RUNTIME_MOUNTS):
                visit(path)

    visit(root)
    return found


def write_layer(root: Path, out_dir: Path, epoch: int) -> Layer:
    """The tar.gz of ``root`` as one layer, stored in ``out_dir`` under its digest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plain = out_dir / "layer.tar"
    with tarfile.open(plain, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in _walk(root):
            arcname = path.relative_to(root).as_posix()
            info = tar.gettarinfo(str(path), arcname)
            if info is None or info.type in (tarfile.CHRTYPE, tarfile.BLKTYPE,
                                             tarfile.FIFOTYPE):
                continue  # sockets, device nodes and pipes are the runtime's to make
            info.mtime = min(int(info.mtime), epoch)
            info.uname = info.gname = ""
            info.pax_headers = {}
            if info.isreg():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    diff_id = _sha256_file(plain)
    uncompressed = plain.stat().st_size
    packed = out_dir / "layer.tar.gz"
    with plain.open("rb") as src, packed.open("wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as gz:
        shutil.copyfileobj(src, gz, 1 << 20)
    plain.unlink()
    digest = _sha256_file(packed)
    stored = out_dir / digest.removeprefix("sha256:")
    packed.rename(stored)
    return Layer(Blob(LAYER, stored, digest, stored.stat().st_size), diff_id, uncompressed)


def _json_blob(media_type: str, value: Any, out_dir: Path) -> Blob:
    data = canonical_json(value)
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    path = out_dir / digest.removeprefix("sha256:")
    path.write_bytes(data)
    return Blob(media_type, path, digest, len(data))


@dataclass(frozen=True)
class Image:
    archive: Path
    #: The manifest's digest: what ``image@sha256:...`` names, and what a registry reports.
    digest: str
    compressed_size: int
    uncompressed_size: int


def write_archive(layers: list[Layer], config: dict[str, Any], ref_name: str,
                  archive: Path, epoch: int, work: Path) -> Image:
    """An ``oci-archive`` holding one image (``config`` plus ``layers``) tagged ``ref_name``."""
    config = {**config, "rootfs": {"type": "layers", "diff_ids": [x.diff_id for x in layers]}}
    config_blob = _json_blob(CONFIG, config, work)
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST,
                "config": config_blob.descriptor(),
                "layers": [x.blob.descriptor() for x in layers]}
    manifest_blob = _json_blob(MANIFEST, manifest, work)
    index = {"schemaVersion": 2, "mediaType": INDEX,
             "manifests": [manifest_blob.descriptor(
                 annotations={"org.opencontainers.image.ref.name": ref_name})]}
    blobs = sorted([config_blob, manifest_blob, *(x.blob for x in layers)],
                   key=lambda b: b.digest)
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        def add(name: str, data: bytes | None = None, path: Path | None = None) -> None:
            info = tarfile.TarInfo(name)
            info.mtime = epoch
            if data is None and path is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                return
            info.mode = 0o644
            if path is not None:
                info.size = path.stat().st_size
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                assert data is not None
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

        add("oci-layout", canonical_json({"imageLayoutVersion": "1.0.0"}))
        add("index.json", canonical_json(index))
        add("blobs")
        add("blobs/sha256")
        for blob in blobs:
            add(f"blobs/sha256/{blob.digest.removeprefix('sha256:')}", path=blob.data_path)
    partial.replace(archive)
    return Image(archive, manifest_blob.digest, sum(x.blob.size for x in layers),
                 sum(x.uncompressed_size for x in layers))


def clamp_mtimes(root: Path, epoch: int) -> None:
    """Set every mtime later than ``epoch`` to ``epoch`` (files from packages keep theirs)."""
    for path in [root, *_walk(root)]:
        st = path.lstat()
        if st.st_mtime > epoch:
            os.utime(path, (epoch, epoch), follow_symlinks=False)
