"""A FUSE file that answers for its first 8 MiB and then never again (a mount that dies
while a file is being read): real hangs from the kernel, after real data.

    python tests/fuse_stall.py MOUNTPOINT

/rank3.log   a real CUDA OOM line, then step lines to 8 MiB + 64 KiB (more than one read
             of the scan); apparent size 16 MiB; reads past that block until the
             filesystem is unmounted
/dead/...    any lookup under it (stat, open, statvfs of a path there) never answers until
             unmounted: a dead mount named by a log line (not listed, so listing the mount
             does not hang)
"""

import errno
import stat
import sys
import threading
import time

import mfusepy as fuse

OOM = (b"[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 19.68 GiB. GPU 0 has a total "
       b"capacity of 23.68 GiB of which 11.88 GiB is free. Including non-PyTorch memory, this process has 11.79 GiB "
       b"memory in use.\n")
STEP = b"[rank3]: step %06d | loss 2.0421 | lr 3.000e-04\n"
GOOD = (8 << 20) + (64 << 10)
SIZE = 16 << 20
NOW = time.time()
STOP = threading.Event()


def _data() -> bytes:
    out, i, n = [OOM], 0, len(OOM)
    while n < GOOD:
        out.append(STEP % i)
        n += len(out[-1])
        i += 1
    return b"".join(out)[:GOOD]


DATA = _data()


class Stalling(fuse.Operations):
    def getattr(self, path, fh=None):
        if path == "/dead" or path.startswith("/dead/"):
            STOP.wait()
            raise fuse.FuseOSError(errno.EIO)
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2, "st_ctime": NOW, "st_mtime": NOW, "st_atime": NOW}
        if path == "/rank3.log":
            return {"st_mode": stat.S_IFREG | 0o444, "st_nlink": 1, "st_size": SIZE, "st_blocks": SIZE // 512,
                    "st_ctime": NOW, "st_mtime": NOW, "st_atime": NOW}
        raise fuse.FuseOSError(errno.ENOENT)

    def readdir(self, path, fh):
        return [".", "..", "rank3.log"]

    def open(self, path, fi):
        fi.direct_io = 1  # short reads reach the reader as they are
        return 0

    def read(self, path, size, offset, fh):
        if offset >= GOOD:
            STOP.wait()
            raise fuse.FuseOSError(errno.EIO)
        return DATA[offset : min(offset + size, GOOD)]


if __name__ == "__main__":
    fuse.FUSE(Stalling(), sys.argv[1], foreground=True, nothreads=False, ro=True, raw_fi=True)
