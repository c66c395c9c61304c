"""release.oci: the same tree gives the same bytes, whatever the files' on-disk times; the
layer keeps what a root file system needs (modes, owners by number, links) and nothing of the
runtime's mount points; the archive is a well-formed OCI layout skopeo reads."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from release import oci

EPOCH = 1_700_000_000
EARLY = EPOCH - 86_400 * 30  # a file from a package, older than the build's epoch
REF = "1.2.3"
CONFIG: dict[str, Any] = {"architecture": "amd64", "os": "linux",
                          "config": {"User": "65532:65532", "Entrypoint": ["/bin/tool"]}}
OWNER = 65532
#: Giving a file away needs root; without it the owned file keeps the test's own uid.
IS_ROOT = os.geteuid() == 0


def make_tree(root: Path, *, late: int, atime: int) -> Path:
    """A small root file system; every mtime later than EPOCH is ``late`` (but one file's,
    EARLY), every atime ``atime``."""
    for d in ("bin", "etc", "usr/lib", "usr/bin", "tmp/cache", "proc/1", "dev", "empty"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "bin/tool").write_bytes(b"#!/bin/sh\necho tool\n")
    (root / "bin/tool").chmod(0o755)
    (root / "etc/config").write_text("key = value\n")
    (root / "etc/config").chmod(0o644)
    os.link(root / "etc/config", root / "etc/config-link")
    (root / "etc/old").write_text("from a package\n")
    (root / "etc/owned").write_text("owned by the service user\n")
    if IS_ROOT:
        os.chown(root / "etc/owned", OWNER, OWNER)
    (root / "usr/lib/libfoo.so.1").write_bytes(bytes(range(256)) * 40)
    (root / "usr/bin/python3").symlink_to("python3.13")
    (root / "usr/bin/python3.13").write_bytes(b"\x7fELF python")
    (root / "lib").symlink_to("usr/lib")
    (root / "usr/bin/abs").symlink_to("/bin/tool")
    (root / "tmp/cache/junk").write_text("left by a build step\n")
    (root / "tmp/scratch").write_text("scratch\n")
    (root / "proc/1/status").write_text("Name: init\n")
    os.mkfifo(root / "etc/pipe")
    for path in [*sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True), root]:
        t = EARLY if path.name == "old" else late
        os.utime(path, (atime, t), follow_symlinks=False)
    return root


def build(base: Path, *, late: int = EPOCH + 1_000, atime: int = EPOCH + 5_000,
          change: Any = None) -> tuple[oci.Layer, oci.Image]:
    root = make_tree(base / "rootfs", late=late, atime=atime)
    if change is not None:
        change(root)
    layer = oci.write_layer(root, base / "blobs", EPOCH)
    image = oci.write_archive([layer], CONFIG, REF, base / "out" / "image.oci.tar", EPOCH,
                              base / "blobs")
    return layer, image


def members(layer: oci.Layer) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(layer.blob.data_path, "r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def read_archive(path: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            f = tar.extractfile(m)
            out[m.name] = f.read() if f is not None else b""
    return out


def sha256(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


# -- the same inputs, the same bytes ---------------------------------------------------------


def test_same_tree_twice_gives_the_same_digest_and_bytes(tmp_path: Path) -> None:
    layer_a, a = build(tmp_path / "a", late=EPOCH + 1_000, atime=EPOCH + 50)
    layer_b, b = build(tmp_path / "b", late=EPOCH + 777_777, atime=EPOCH + 999_999)
    assert (tmp_path / "a/rootfs/bin/tool").stat().st_mtime != \
        (tmp_path / "b/rootfs/bin/tool").stat().st_mtime
    assert a.digest == b.digest
    assert layer_a.blob.digest == layer_b.blob.digest
    assert layer_a.diff_id == layer_b.diff_id
    assert a.archive.read_bytes() == b.archive.read_bytes()
    assert a.compressed_size == layer_a.blob.size
    assert a.uncompressed_size == layer_a.uncompressed_size


def test_times_at_or_after_the_epoch_all_count_as_the_epoch(tmp_path: Path) -> None:
    _, at_epoch = build(tmp_path / "a", late=EPOCH)
    _, later = build(tmp_path / "b", late=EPOCH + 10)
    assert at_epoch.digest == later.digest


def test_changed_content_changes_the_digest(tmp_path: Path) -> None:
    _, base = build(tmp_path / "a")

    def edit(root: Path) -> None:
        (root / "usr/lib/libfoo.so.1").write_bytes(bytes(range(256)) * 40 + b"!")
        os.utime(root / "usr/lib/libfoo.so.1", (EPOCH + 5, EPOCH + 5))

    layer, changed = build(tmp_path / "b", change=edit)
    assert changed.digest != base.digest
    assert members(layer)["usr/lib/libfoo.so.1"].size == 256 * 40 + 1


def test_changed_mode_changes_the_digest(tmp_path: Path) -> None:
    _, base = build(tmp_path / "a")
    layer, changed = build(tmp_path / "b",
                           change=lambda root: (root / "etc/config").chmod(0o600))
    assert changed.digest != base.digest
    assert members(layer)["etc/config"].mode & 0o7777 == 0o600


def test_changed_older_mtime_changes_the_digest(tmp_path: Path) -> None:
    # A time before the epoch is kept, so it is part of what the digest covers.
    _, base = build(tmp_path / "a")
    _, changed = build(tmp_path / "b", change=lambda root: os.utime(
        root / "etc/old", (EARLY, EARLY - 1)))
    assert changed.digest != base.digest


# -- what the layer holds -------------------------------------------------------------------


def test_mtimes_before_the_epoch_kept_later_ones_clamped(tmp_path: Path) -> None:
    layer, _ = build(tmp_path, late=EPOCH + 123_456)
    found = members(layer)
    assert found["etc/old"].mtime == EARLY
    for name in ("bin", "bin/tool", "etc/config", "usr/bin/python3", "tmp", "proc"):
        assert found[name].mtime == EPOCH, name


def test_owners_are_numbers_only(tmp_path: Path) -> None:
    layer, _ = build(tmp_path)
    found = members(layer)
    assert {(m.uname, m.gname) for m in found.values()} == {("", "")}
    if IS_ROOT:
        assert (found["etc/owned"].uid, found["etc/owned"].gid) == (OWNER, OWNER)
    assert (found["etc/config"].uid, found["etc/config"].gid) == (os.getuid(), os.getgid())


def test_no_access_or_change_times_are_stored(tmp_path: Path) -> None:
    layer, _ = build(tmp_path)
    with tarfile.open(layer.blob.data_path, "r:gz") as tar:
        headers = [m.pax_headers for m in tar.getmembers()]
    assert not any("atime" in h or "ctime" in h for h in headers)


def test_runtime_mount_points_kept_empty(tmp_path: Path) -> None:
    layer, _ = build(tmp_path)
    names = set(members(layer))
    for mount in ("tmp", "proc", "dev"):
        assert mount in names
        assert members(layer)[mount].isdir()
        assert not [n for n in names if n.startswith(f"{mount}/")], mount
    assert "empty" in names and members(layer)["empty"].isdir()


def test_a_deeper_directory_named_like_a_mount_point_keeps_its_contents(tmp_path: Path) -> None:
    def add(root: Path) -> None:
        (root / "usr/tmp").mkdir()
        (root / "usr/tmp/kept").write_text("kept\n")

    layer, _ = build(tmp_path, change=add)
    assert "usr/tmp/kept" in members(layer)


def test_pipes_are_left_out(tmp_path: Path) -> None:
    layer, _ = build(tmp_path)
    assert "etc/pipe" not in members(layer)


def test_a_hard_link_is_stored_as_a_link(tmp_path: Path) -> None:
    layer, _ = build(tmp_path)
    found = members(layer)
    assert found["etc/config"].isreg()
    assert found["etc/config-link"].islnk()
    assert found["etc/config-link"].linkname == "etc/config"
    assert found["etc/config-link"].size == 0


def test_symlinks_are_stored_as_symlinks(tmp_path: Path) -> None:
    layer, _ = build(tmp_path)
    found = members(layer)
    assert found["usr/bin/python3"].issym()
    assert found["usr/bin/python3"].linkname == "python3.13"
    assert found["lib"].issym() and found["lib"].linkname == "usr/lib"
    assert found["usr/bin/abs"].issym() and found["usr/bin/abs"].linkname == "/bin/tool"
    # a link to a directory is not followed: /lib's files appear once, under usr/lib
    assert not [n for n in found if n.startswith("lib/")]


def test_layer_contents_and_modes(tmp_path: Path) -> None:
    layer, _ = build(tmp_path)
    with tarfile.open(layer.blob.data_path, "r:gz") as tar:
        tool = tar.getmember("bin/tool")
        f = tar.extractfile(tool)
        assert f is not None
        assert f.read() == b"#!/bin/sh\necho tool\n"
        assert tool.mode & 0o7777 == 0o755
        names = tar.getnames()
    # a directory comes before what it holds, and names are in a fixed (sorted) order
    assert names.index("usr") < names.index("usr/bin") < names.index("usr/bin/python3")
    assert names.index("usr/bin/abs") < names.index("usr/bin/python3")


def test_layer_gzip_has_no_name_or_timestamp(tmp_path: Path) -> None:
    layer, _ = build(tmp_path)
    head = layer.blob.data_path.read_bytes()[:10]
    assert head[:2] == b"\x1f\x8b"
    flags, mtime = head[3], int.from_bytes(head[4:8], "little")
    assert flags & 0x08 == 0  # FNAME
    assert mtime == 0


# -- the archive -----------------------------------------------------------------------------


def test_archive_is_an_oci_layout_whose_blobs_match_their_names(tmp_path: Path) -> None:
    layer, image = build(tmp_path)
    files = read_archive(image.archive)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    assert index["schemaVersion"] == 2
    assert index["mediaType"] == oci.INDEX
    (entry,) = index["manifests"]
    assert entry["annotations"] == {"org.opencontainers.image.ref.name": REF}
    assert entry["digest"] == image.digest
    assert entry["mediaType"] == oci.MANIFEST

    blobs = {f"sha256:{name.removeprefix('blobs/sha256/')}": data
             for name, data in files.items() if name.startswith("blobs/sha256/")}
    for digest, data in blobs.items():
        assert sha256(data) == digest
    manifest_bytes = blobs[image.digest]
    assert entry["size"] == len(manifest_bytes)
    manifest = json.loads(manifest_bytes)
    assert manifest["schemaVersion"] == 2
    assert manifest["config"]["mediaType"] == oci.CONFIG
    descriptors = [manifest["config"], *manifest["layers"]]
    for d in descriptors:
        assert d["size"] == len(blobs[d["digest"]])
    assert {d["digest"] for d in descriptors} | {image.digest} == set(blobs)
    assert [x["mediaType"] for x in manifest["layers"]] == [oci.LAYER]
    assert manifest["layers"][0]["digest"] == layer.blob.digest

    config = json.loads(blobs[manifest["config"]["digest"]])
    assert config["config"] == CONFIG["config"]
    layer_tar = gzip.decompress(blobs[manifest["layers"][0]["digest"]])
    assert config["rootfs"] == {"type": "layers", "diff_ids": [sha256(layer_tar)]}
    assert layer.diff_id == sha256(layer_tar)
    assert image.uncompressed_size == len(layer_tar)


def test_archive_entries_have_fixed_times_and_no_owners(tmp_path: Path) -> None:
    _, image = build(tmp_path)
    with tarfile.open(image.archive) as tar:
        entries = tar.getmembers()
    assert entries[0].name == "oci-layout" and entries[1].name == "index.json"
    assert {m.mtime for m in entries} == {EPOCH}
    assert {(m.uid, m.gid, m.uname, m.gname) for m in entries} == {(0, 0, "", "")}
    assert "blobs" in {m.name for m in entries if m.isdir()}
    assert not image.archive.with_name(image.archive.name + ".partial").exists()


def test_canonical_json_is_sorted_and_compact() -> None:
    assert oci.canonical_json({"b": [1, {"d": 2, "c": 3}], "a": "x"}) == \
        b'{"a":"x","b":[1,{"c":3,"d":2}]}'


def test_skopeo_reads_the_archive_and_reports_the_same_digest(tmp_path: Path) -> None:
    if shutil.which("skopeo") is None:
        pytest.skip("skopeo is not installed (apt-get install skopeo)")
    _, image = build(tmp_path)
    done = subprocess.run(["skopeo", "inspect", f"oci-archive:{image.archive}"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    inspected = json.loads(done.stdout)
    assert inspected["Digest"] == image.digest
    assert inspected["Architecture"] == "amd64"
    done = subprocess.run(["skopeo", "inspect", "--config", f"oci-archive:{image.archive}"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["config"]["Entrypoint"] == ["/bin/tool"]


# -- clamp_mtimes ----------------------------------------------------------------------------


def test_clamp_mtimes_lowers_only_later_times_and_not_through_links(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    (root / "d/new").write_text("new\n")
    (root / "d/old").write_text("old\n")
    outside = tmp_path / "outside"
    outside.write_text("not the image's\n")
    (root / "d/link").symlink_to(outside)
    os.utime(root / "d/new", (EPOCH + 9, EPOCH + 9))
    os.utime(root / "d/old", (EARLY, EARLY))
    os.utime(outside, (EPOCH + 9, EPOCH + 9))
    os.utime(root / "d/link", (EPOCH + 9, EPOCH + 9), follow_symlinks=False)
    os.utime(root / "d", (EPOCH + 9, EPOCH + 9))
    os.utime(root, (EPOCH + 9, EPOCH + 9))

    oci.clamp_mtimes(root, EPOCH)

    assert (root / "d/new").stat().st_mtime == EPOCH
    assert (root / "d/old").stat().st_mtime == EARLY
    assert (root / "d").stat().st_mtime == EPOCH
    assert root.stat().st_mtime == EPOCH
    assert (root / "d/link").lstat().st_mtime == EPOCH
    assert outside.stat().st_mtime == EPOCH + 9  # the link's target is not the image's


def test_clamped_tree_and_layer_agree(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "rootfs", late=EPOCH + 42, atime=EPOCH)
    oci.clamp_mtimes(root, EPOCH)
    assert (root / "bin/tool").stat().st_mtime == EPOCH
    assert (root / "etc/old").stat().st_mtime == EARLY
    layer = oci.write_layer(root, tmp_path / "blobs", EPOCH)
    with tarfile.open(fileobj=io.BytesIO(layer.blob.data_path.read_bytes()), mode="r:gz") as t:
        assert t.getmember("bin/tool").mtime == EPOCH


def test_a_socket_in_the_tree_is_left_out(tmp_path: Path) -> None:
    def add_socket(root: Path) -> None:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(root / "etc/control.sock"))
        server.close()

    layer, _ = build(tmp_path, change=add_socket)
    names = members(layer)
    assert "etc/control.sock" not in names
    assert "etc/config" in names
