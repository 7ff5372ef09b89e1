"""A tiny FUSE filesystem for fault tests: real EIO and real hangs from the kernel.

    python tests/fusefs.py MOUNTPOINT

/rank0.log       a good log with a real ENOSPC line
/eio-rank1.log   every read fails with EIO (as a dying disk or a broken FUSE mount does)
/hang-rank2.log  every read blocks until the filesystem is unmounted (a dead NFS server)
/hungdir/        listing it blocks for ever
"""

import errno
import stat
import sys
import threading
import time

import mfusepy as fuse

GOOD = b"OSError: [Errno 28] No space left on device: '/ckpt/global_step100/mp_rank_00_model_states.pt'\n"
NOW = time.time()
STOP = threading.Event()


class Faulty(fuse.Operations):
    files = {"/rank0.log": GOOD, "/eio-rank1.log": GOOD, "/hang-rank2.log": GOOD}

    def getattr(self, path, fh=None):
        if path in ("/", "/hungdir"):
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2, "st_ctime": NOW, "st_mtime": NOW, "st_atime": NOW}
        if path in self.files:
            return {"st_mode": stat.S_IFREG | 0o444, "st_nlink": 1, "st_size": len(self.files[path]),
                    "st_ctime": NOW, "st_mtime": NOW, "st_atime": NOW}
        raise fuse.FuseOSError(errno.ENOENT)

    def readdir(self, path, fh):
        if path == "/hungdir":
            STOP.wait()
            return [".", ".."]
        return [".", "..", "hungdir"] + [p[1:] for p in self.files]

    def open(self, path, flags):
        return 0

    def read(self, path, size, offset, fh):
        if path == "/eio-rank1.log":
            raise fuse.FuseOSError(errno.EIO)
        if path == "/hang-rank2.log":
            STOP.wait()
            raise fuse.FuseOSError(errno.EIO)
        return self.files[path][offset : offset + size]


if __name__ == "__main__":
    fuse.FUSE(Faulty(), sys.argv[1], foreground=True, nothreads=False, ro=True)
