"""``make image``: the scheduler's OCI image, built from Debian's packages without a container
daemon, into ``dist/sunk-<version>.oci.tar``.

1. A minimal Debian root filesystem with Debian's Python (debootstrap), cached per suite and
   package list under ``~/.cache/sunk-image``.
2. Everything Python does not need at run time is removed, package managers included: the
   files each package listed, straight from dpkg's database (no maintainer scripts run), and
   docs, locales and caches.
3. The locked dependencies (``requirements.lock``, every hash checked) and sunk's own wheel,
   installed by uv for the image's Python; shared objects stripped.
4. Byte-code compiled by the image's Python in hash-checked-never mode, so no timestamp counts.
5. One layer and the archive written by :mod:`release.oci`, every mtime clamped to
   ``SOURCE_DATE_EPOCH`` (the commit's time): the same commit and packages, the same digest.

Needs root (debootstrap and chroot) and network access to a Debian archive and PyPI; installs
debootstrap and binutils (``strip``) with apt when they are missing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from release import oci
from release.project import DIST, REPO, revision, say, source_date_epoch, version

# The test bed's Slurm chroot comes from the same Debian archive, with the same host tools.
from testbed.build import debian_mirror, ensure_host_packages

SUITE = "trixie"
#: What the image is made of; debootstrap's other packages are removed once Python is in.
WANTED = ("python3", "ca-certificates", "dash", "base-files", "base-passwd", "netbase", "tzdata",
          "libstdc++6")
#: Dependencies only for installing or configuring packages: not followed when working out
#: what the wanted packages need at run time.
INSTALL_TIME = frozenset({"dpkg", "debconf", "perl-base", "openssl", "debianutils",
                          "init-system-helpers", "sensible-utils"})
#: Removed last: the image's ldconfig and compileall run before it goes.
LAST = "libc-bin"
USER, UID = "sunk", 65532
ENTRYPOINT = "/usr/local/bin/sunk-scheduler"
PORTS = (8000, 8080, 8081, 8082)  # hook API, metrics, health probes, dashboard
#: Trimmed from every image: documentation (copyright files stay), locales, caches, logs.
TRIM = ("usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian",
        "usr/share/bug", "var/cache", "var/log",
        "var/lib/apt", "etc/apt", "usr/share/doc-base", "etc/shadow", "etc/gshadow",
        "etc/shadow-", "etc/gshadow-", "etc/passwd-", "etc/group-", "etc/machine-id",
        # glibc's iconv modules: Python carries its own codecs
        "usr/lib/x86_64-linux-gnu/gconv")


def cache_root() -> Path:
    env = os.environ.get("SUNK_IMAGE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "sunk-image"


def run(cmd: list[str], *, what: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"release: {what} failed ({done.returncode}):\n"
                         f"{(done.stdout + done.stderr)[-4000:]}")
    return done.stdout


# -- 1. the Debian base, cached --------------------------------------------------------------


def base_rootfs() -> Path:
    """debootstrap's minimal system with ``WANTED``, built once per suite and package list."""
    key = hashlib.sha256(f"{SUITE} {' '.join(WANTED)}".encode()).hexdigest()[:12]
    root = cache_root() / f"debian-{SUITE}-{key}"
    if (root / ".sunk-ready").exists():
        return root
    if os.geteuid() != 0:
        raise SystemExit("release: building the image needs root (debootstrap, chroot)")
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    say(f"debootstrap: Debian {SUITE} with {', '.join(WANTED)} (first build only: a minute)")
    run(["debootstrap", "--variant=minbase", f"--include={','.join(WANTED)}", SUITE, str(tmp),
         debian_mirror()], what="debootstrap")
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    (root / ".sunk-ready").write_text(f"{SUITE}\n")
    return root


# -- 2. what Python does not need, removed ----------------------------------------------------


@dataclass(frozen=True)
class Package:
    name: str
    needs: tuple[str, ...]
    stanza: str


def read_status(root: Path) -> list[Package]:
    """dpkg's database of installed packages, each with the packages it depends on (the first
    of each set of alternatives: the one debootstrap installed)."""
    text = (root / "var/lib/dpkg/status").read_text()
    packages = []
    for stanza in text.strip().split("\n\n"):
        fields = dict(re.findall(r"^([\w-]+): ?(.*(?:\n .*)*)", stanza, re.M))
        needs = []
        for field in ("Pre-Depends", "Depends"):
            for alternative in filter(None, (a.strip() for a in fields.get(field, "").split(","))):
                needs.append(re.split(r"[ :(]", alternative.split("|")[0].strip())[0])
        packages.append(Package(fields["Package"], tuple(needs), stanza))
    return packages


def needed(packages: list[Package], wanted: Iterable[str]) -> set[str]:
    """``wanted`` and everything they need at run time (install-time tools not followed)."""
    by_name = {p.name: p for p in packages}
    keep: set[str] = set()
    todo = list(wanted)
    while todo:
        name = todo.pop()
        if name in keep or name in INSTALL_TIME or name not in by_name:
            continue  # a virtual package: whatever provides it is reached otherwise, or not
        keep.add(name)
        todo.extend(by_name[name].needs)
    return keep


def _inside(root: Path, listed: str) -> Path:
    """The path dpkg listed, resolved inside ``root`` (Debian merges /lib into /usr/lib)."""
    parent = os.path.realpath(root / os.path.dirname(listed.lstrip("/")))
    real_root = os.path.realpath(root)
    if parent != real_root and not parent.startswith(real_root + os.sep):
        raise SystemExit(f"release: {listed} leaves the root filesystem")
    return Path(parent) / os.path.basename(listed)


def _listed(root: Path, package: str) -> list[str]:
    info = root / "var/lib/dpkg/info"
    for name in (f"{package}.list", f"{package}:amd64.list"):
        if (info / name).exists():
            return (info / name).read_text().splitlines()
    return []


def remove_packages(root: Path, remove: set[str], packages: list[Package]) -> None:
    """Delete the files of ``remove`` (not those a kept package also lists) and their dpkg
    records; directories left empty go too. Maintainer scripts are not run: they would need
    the very tools being removed, and nothing they undo matters in an image."""
    keep = {p.name for p in packages} - remove
    kept_paths = {_inside(root, f) for p in keep for f in _listed(root, p)}
    files: list[Path] = []
    dirs: list[Path] = []
    for package in sorted(remove):
        for listed in _listed(root, package):
            path = _inside(root, listed)
            if path in kept_paths or listed in ("/.", "/"):
                continue
            if path.is_symlink():
                target = resolve_inside(root, path)
                if target is not None and target.is_dir():
                    continue  # a directory to dpkg (/lib -> usr/lib), which keeps full ones
                files.append(path)
            else:
                (dirs if path.is_dir() else files).append(path)
    for path in files:
        path.unlink(missing_ok=True)
    for path in sorted(set(dirs), key=lambda p: len(p.parts), reverse=True):
        if path.exists() and not any(path.iterdir()):
            path.rmdir()
    info = root / "var/lib/dpkg/info"
    for entry in list(info.iterdir()):
        # <package>[:<arch>].<kind>; a kind has no dot, a package name may (python3.13)
        if entry.name.rpartition(".")[0].partition(":")[0] in remove:
            entry.unlink()
    status = "\n\n".join(p.stanza for p in packages if p.name not in remove)
    (root / "var/lib/dpkg/status").write_text(status + "\n")


def _tree(root: Path) -> list[Path]:
    """Every path under ``root``, symbolic links not followed (/lib is a link to /usr/lib)."""
    found: list[Path] = []
    for directory, subdirs, names in os.walk(root):
        found.extend(Path(directory) / n for n in sorted([*subdirs, *names]))
    return found


def remove_dangling_links(root: Path) -> None:
    """Links left pointing at removed files (update-alternatives' among them)."""
    for path in _tree(root):
        if path.is_symlink() and resolve_inside(root, path) is None:
            path.unlink()


def resolve_inside(root: Path, path: Path, hops: int = 40) -> Path | None:
    """Where ``path`` (under ``root``) leads when every link is read as the image reads it,
    an absolute target starting again at ``root``; None if it leads nowhere (or loops)."""
    current = root
    for part in path.relative_to(root).parts:
        step = current / part
        if step.is_symlink():
            if hops <= 0:
                return None
            target = os.readlink(step)
            base = root if target.startswith("/") else current
            joined = Path(os.path.normpath(base / target.lstrip("/")))
            if joined != root and root not in joined.parents:
                joined = root  # ".." above the image's root stays at its root
            resolved = resolve_inside(root, joined, hops - 1)
            if resolved is None:
                return None
            current = resolved
        elif step.exists():
            current = step
        else:
            return None
    return current


def trim(root: Path) -> None:
    for rel in TRIM:
        path = root / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    doc = root / "usr/share/doc"
    if doc.is_dir():  # copyright files stay with the packages they describe
        for path in sorted(_tree(doc), key=lambda p: len(p.parts), reverse=True):
            if path.is_dir() and not path.is_symlink():
                if not any(path.iterdir()):
                    path.rmdir()
            elif path.name != "copyright":
                path.unlink()
    for name in ("available", "available-old", "status-old", "diversions-old", "lock",
                 "lock-frontend", "triggers/Lock", "cmethopt"):
        (root / "var/lib/dpkg" / name).unlink(missing_ok=True)
    for cache in [p for p in _tree(root) if p.name == "__pycache__" and not p.is_symlink()]:
        shutil.rmtree(cache, ignore_errors=True)


# -- 3. Python packages -----------------------------------------------------------------------


def python_version(root: Path) -> str:
    """The image's Python, ``3.13`` for ``/usr/bin/python3 -> python3.13``."""
    match = re.fullmatch(r"python(3\.\d+)", os.readlink(root / "usr/bin/python3"))
    if not match:
        raise SystemExit("release: cannot tell the image's Python version")
    return match.group(1)


def build_wheel(out: Path) -> Path:
    shutil.rmtree(out, ignore_errors=True)
    run([str(Path(sys.executable).with_name("uv")), "build", "--wheel", "--quiet",
         "--out-dir", str(out), str(REPO)], what="building sunk's wheel")
    (wheel,) = out.glob("sunk-*.whl")
    return wheel


def install_python_packages(root: Path, wheel: Path) -> Path:
    """The locked dependencies and sunk into the image's ``/usr/local`` site directory, which
    Debian's Python has on its path; their shared objects stripped of symbols."""
    py = python_version(root)
    site = root / f"usr/local/lib/python{py}/dist-packages"
    uv = str(Path(sys.executable).with_name("uv"))
    # Copies, not uv's hard links into its cache: the strip below would change the cached
    # files, and the next build would strip them again into other bytes.
    target = ["--target", str(site), "--python-version", py,
              "--python-platform", "x86_64-manylinux_2_36", "--no-deps", "--quiet",
              "--link-mode=copy"]
    run([uv, "pip", "install", *target, "--require-hashes", "-r",
         str(REPO / "requirements.lock")], what="installing the locked dependencies")
    run([uv, "pip", "install", *target, str(wheel)], what="installing sunk")
    # What names the building machine: the wheel's path and cache time, and console scripts
    # whose first line is the builder's Python (the image has its own entry point).
    for name in ("direct_url.json", "uv_cache.json"):
        for path in site.glob(f"*.dist-info/{name}"):
            path.unlink()
    shutil.rmtree(site / "bin", ignore_errors=True)
    for record in site.glob("*.dist-info/RECORD"):
        lines = record.read_text().splitlines()
        record.write_text("".join(f"{line}\n" for line in lines
                                  if (site / line.rsplit(",", 2)[0]).exists()))
    shared = [str(p) for p in _tree(site)
              if re.search(r"\.so(\.|$)", p.name) and p.is_file() and not p.is_symlink()]
    if shared:
        run(["strip", "--strip-unneeded", *shared], what="stripping shared objects")
    return site


def add_entrypoint_and_user(root: Path) -> None:
    script = root / ENTRYPOINT.lstrip("/")
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("#!/usr/bin/python3 -I\n"
                      "import sys\n\nfrom sunk.__main__ import main\n\nsys.exit(main())\n")
    script.chmod(0o755)
    policies = root / "etc/sunk/policies"
    policies.mkdir(parents=True, exist_ok=True)
    for source in sorted((REPO / "policies").glob("*.yaml")):
        shutil.copyfile(source, policies / source.name)
    for name, line in (("etc/passwd", f"{USER}:x:{UID}:{UID}:sunk:/nonexistent:/bin/false"),
                       ("etc/group", f"{USER}:x:{UID}:")):
        path = root / name
        lines = [x for x in path.read_text().splitlines() if not x.startswith(f"{USER}:")]
        path.write_text("\n".join([*lines, line]) + "\n")


#: Run by the image's Python: import every module of sunk and its dashboard, then compile
#: what was imported (and those packages whole). The rest, such as the fake-data generator a
#: dependency of litestar's carries, compiles in memory in the rare case it is ever imported.
COMPILE_IMPORTED = """
import importlib, importlib.util, pkgutil, py_compile, sys
import sunk, web
for package in (sunk, web):
    for found in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(found.name)
files = sorted({m.__file__ for m in list(sys.modules.values())
                if getattr(m, "__file__", None) and m.__file__.endswith(".py")})
for file in files:
    py_compile.compile(file, cfile=importlib.util.cache_from_source(file), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
print(len(files))
"""


def compile_bytecode(root: Path) -> int:
    """Byte-code for every module the scheduler imports, compiled by the image's Python as
    unchecked-hash .pyc files: no timestamp counts, and the read-only root filesystem never
    needs them rewritten. Returns how many modules."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8"}
    # -B: importing writes no .pyc of its own. A module whose import fails half-way (httpcore's
    # http2 without h2) is compiled but not kept in sys.modules, so it left a timestamp .pyc
    # holding its source's mtime, which differs between a download and uv's cache.
    out = run([shutil.which("chroot") or "/usr/sbin/chroot", str(root), "/usr/bin/python3",
               "-I", "-B", "-c", COMPILE_IMPORTED], what="compiling byte-code", env=env)
    return int(out.split()[-1])


def run_ldconfig(root: Path) -> None:
    run(["chroot", str(root), "/sbin/ldconfig"], what="ldconfig")
    (root / "var/cache/ldconfig/aux-cache").unlink(missing_ok=True)


# -- the image ---------------------------------------------------------------------------------


def image_config(epoch: int) -> dict[str, object]:
    created = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    labels = {"org.opencontainers.image.title": "sunk",
              "org.opencontainers.image.description":
                  "A Kubernetes scheduler that places Pods through Slurm",
              "org.opencontainers.image.version": version(),
              "org.opencontainers.image.revision": revision(),
              "org.opencontainers.image.source": "https://github.com/sunk-project/sunk",
              "org.opencontainers.image.licenses": "Apache-2.0",
              "org.opencontainers.image.created": created}
    return {
        "created": created, "architecture": "amd64", "os": "linux",
        "config": {
            "User": f"{UID}:{UID}",
            "Entrypoint": [ENTRYPOINT],
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "PYTHONUNBUFFERED=1",
                    "PYTHONDONTWRITEBYTECODE=1", "SUNK_POLICIES_DIR=/etc/sunk/policies"],
            "WorkingDir": "/",
            "ExposedPorts": {f"{p}/tcp": {} for p in PORTS},
            "Labels": labels,
        },
        "history": [{"created": created, "created_by": "make image (release/image.py)"}],
    }


def archive_path() -> Path:
    return DIST / f"sunk-{version()}.oci.tar"


def build(out: Path | None = None) -> oci.Image:
    epoch = source_date_epoch()
    ensure_host_packages(("debootstrap", "debootstrap"), ("strip", "binutils"))
    base = base_rootfs()
    work = REPO / "build" / "image"
    shutil.rmtree(work, ignore_errors=True)
    root = work / "rootfs"
    work.mkdir(parents=True)
    say("copying the Debian base")
    run(["cp", "-a", str(base), str(root)], what="copying the base")
    (root / ".sunk-ready").unlink()
    packages = read_status(root)
    keep = needed(packages, WANTED)
    remove = {p.name for p in packages} - keep
    say(f"removing {len(remove)} of {len(packages)} packages (keeping {', '.join(sorted(keep))})")
    remove_packages(root, remove - {LAST}, packages)
    remove_dangling_links(root)
    trim(root)
    say("installing the locked dependencies and sunk")
    install_python_packages(root, build_wheel(work / "wheel"))
    add_entrypoint_and_user(root)
    say(f"compiled the byte-code of the {compile_bytecode(root)} modules the scheduler imports")
    run_ldconfig(root)
    remove_packages(root, {LAST}, read_status(root))
    remove_dangling_links(root)
    oci.clamp_mtimes(root, epoch)
    say("writing the layer and the archive")
    layer = oci.write_layer(root, work / "blobs", epoch)
    image = oci.write_archive([layer], image_config(epoch), version(), out or archive_path(),
                              epoch, work / "blobs")
    shutil.rmtree(work)
    return image


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m release.image", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, help=f"default: {archive_path()}")
    args = parser.parse_args(argv)
    image = build(args.output)
    mb = 1024 * 1024
    shown = (image.archive.relative_to(REPO) if image.archive.is_relative_to(REPO)
             else image.archive)
    print(f"image   {shown}\n"
          f"digest  {image.digest}\n"
          f"size    {image.uncompressed_size / mb:.1f} MiB unpacked, "
          f"{image.compressed_size / mb:.1f} MiB compressed\n"
          f"user    {UID}:{UID} ({USER})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
