"""The end of a job's output file, read as the job's owner, never through a symbolic link.

`python -I -S worker/output_reader.py OWNER_UID PATH TAIL`, started by the worker (root) as the
job's owner (its uid, gid and groups: subprocess does setgroups, setgid, setuid before exec), writes
`OK SIZE\\n` and the last TAIL bytes to stdout, or `ERR reason`. Run so, it can read only what the
owner could, and its answers (a file missing, not readable, not a regular file) say only what the
owner could find out by trying; a worker that is not root reads in its own process, as itself
(it runs only its own user's jobs).

Not one component of the path may be a symbolic link: the path is walked from `/` a component at a
time, each looked up with O_NOFOLLOW (O_PATH, so nothing is opened for real on the way), and a link
anywhere is refused. The owner chooses the path (`-o`, the cwd) and could otherwise point a
directory link anywhere. The last component must be a regular file of the owner's: no device is
ever opened (a watchdog's open arms it, a tape's rewinds it) and no FIFO blocks; it is opened for
reading through the handle the walk found, never by its path again.

Runs with -S: built-in modules only, as the shim.
"""

from __future__ import annotations

import errno
import os
import stat
import sys

MAX_TAIL = 512 << 10


class OutputUnreadable(Exception):
    pass


def read_tail(path: str, owner_uid: int, tail: int) -> tuple[bytes, int]:
    """(the last `tail` bytes, the size) of the regular file of `owner_uid`'s at `path`, reached
    without following a symbolic link in any component."""
    handle = _walk(path)
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise OutputUnreadable(f"{path} is not a regular file")
        if info.st_uid != owner_uid:
            raise OutputUnreadable(f"{path} is not the job owner's file")
        # The same inode, through the handle (not the path again, which may have changed since).
        fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise OutputUnreadable(f"cannot open {path}: {exc.strerror or exc}") from None
    finally:
        os.close(handle)
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - max(0, min(tail, MAX_TAIL)))
        chunks, offset = [], start
        while offset < size:
            chunk = os.pread(fd, size - offset, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks), size
    finally:
        os.close(fd)


def _walk(path: str) -> int:
    """An O_PATH handle on `path`'s last component, each component looked up without following a
    link; OutputUnreadable at a link, a missing or unreachable component."""
    if not path.startswith("/"):
        raise OutputUnreadable(f"{path} is not an absolute path")
    parts = [part for part in path.split("/") if part and part != "."]
    at = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            try:
                found = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=at)
            except FileNotFoundError:
                raise OutputUnreadable(f"no file {path} (the job has not written it, or it was removed)") \
                    from None
            except OSError as exc:
                raise OutputUnreadable(f"cannot open {path}: {exc.strerror or exc}") from None
            os.close(at)
            at = found
            mode = os.fstat(at).st_mode
            if stat.S_ISLNK(mode):
                raise OutputUnreadable(f"cannot open {path}: {'/' + '/'.join(parts[:i + 1])} is a symbolic "
                                       "link (output is read through none)")
            if i < len(parts) - 1 and not stat.S_ISDIR(mode):
                raise OutputUnreadable(f"cannot open {path}: {os.strerror(errno.ENOTDIR)}")
        handle, at = at, -1
        return handle
    finally:
        if at >= 0:
            os.close(at)


def main(argv: list[str]) -> int:
    try:
        data, size = read_tail(argv[1], int(argv[0]), int(argv[2]))
    except OutputUnreadable as exc:
        sys.stdout.buffer.write(f"ERR {exc}".encode(errors="replace"))
        return 0
    sys.stdout.buffer.write(f"OK {size}\n".encode() + data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
