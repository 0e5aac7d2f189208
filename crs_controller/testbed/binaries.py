"""Find the kube-apiserver and etcd binaries, building them on first use.

The build lives in ``hack/build-binaries.sh`` so that the shell test command and
this module share one cache; the script prints the directory on its last line.
"""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-binaries.sh"


class BinariesError(RuntimeError):
    """The binaries could not be found or built."""


@dataclass(frozen=True)
class Binaries:
    directory: Path

    @property
    def kube_apiserver(self) -> Path:
        return self.directory / "kube-apiserver"

    @property
    def etcd(self) -> Path:
        return self.directory / "etcd"


@functools.cache
def locate() -> Binaries:
    """Return the binaries, building them if the cache lacks them (minutes, once)."""
    if not BUILD_SCRIPT.is_file():
        raise BinariesError(f"{BUILD_SCRIPT} not found: run from a source checkout")
    # stderr is inherited so that a first, slow build shows its progress.
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise BinariesError(f"{BUILD_SCRIPT} failed with exit code {result.returncode}")
    found = Binaries(Path(lines[-1]))
    for binary in (found.kube_apiserver, found.etcd):
        if not binary.is_file():
            raise BinariesError(
                f"{BUILD_SCRIPT} reported {found.directory} but {binary} is missing"
            )
    return found
