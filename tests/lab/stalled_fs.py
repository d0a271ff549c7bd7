"""A FUSE file system that stalls as a hung NFS or Lustre mount does: the kernel's stat, open or read of some of
its paths does not return until the test lets it go. Mounted by tests/test_stalled_fs.py (FUSE through libfuse3 and
mfusepy; the test installs both):

- `stalled/rank0.log`, `stalled/rank1.log`: stat and open answer, every read blocks;
- `hung/...`: every lookup blocks (a stat of the folder or of anything in it). As on a hung NFS mount, other
  lookups in the same folder then queue behind it in the kernel.

Run as `python stalled_fs.py MOUNTPOINT RELEASE_FILE`; it serves in the foreground until it is unmounted. Once
RELEASE_FILE (outside the mount) exists, every blocked operation fails with EIO and no new one blocks.
"""

import errno
import os
import stat
import sys
import threading

import mfusepy as fuse

LOG = b"".join(b"[rank0]: step %d loss 1.0\n" % step for step in range(20))
_DIR = {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2}


def _file(size: int) -> dict[str, int]:
    return {"st_mode": stat.S_IFREG | 0o644, "st_nlink": 1, "st_size": size}


class Stalling(fuse.Operations):  # type: ignore[misc]
    def __init__(self, release_file: str) -> None:
        self.released = threading.Event()
        threading.Thread(target=self._watch, args=(release_file,), daemon=True).start()

    def _watch(self, release_file: str) -> None:
        while not os.path.exists(release_file):
            self.released.wait(0.05)
        self.released.set()

    def _block(self) -> None:
        self.released.wait()
        raise fuse.FuseOSError(errno.EIO)

    def getattr(self, path: str, fh: int | None = None) -> dict[str, int]:
        if path in ("/", "/stalled"):
            return _DIR
        if path.startswith("/hung"):
            self._block()
        if path in ("/stalled/rank0.log", "/stalled/rank1.log"):
            return _file(len(LOG))
        raise fuse.FuseOSError(errno.ENOENT)

    def readdir(self, path: str, fh: int) -> list[str]:
        names = {"/": ["stalled", "hung"], "/stalled": ["rank0.log", "rank1.log"]}
        return [".", "..", *names.get(path, [])]

    def open(self, path: str, flags: int) -> int:
        return 0

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        self._block()
        return b""


if __name__ == "__main__":
    fuse.FUSE(Stalling(sys.argv[2]), sys.argv[1], foreground=True, ro=True)
