"""One writer per folder: an exclusive ``fcntl.flock`` on ``FOLDER/attnlab.lock``.

    with FolderLock(out):          # refuses at once if another process holds it
        ...                        # write the run

The lock file holds the PID of its holder, so the refusal names it:
``--out runs/a: in use by another attnlab process (PID 4242) ...``, and it is
removed when the holder finishes.  The kernel releases a flock when its
process dies, so the file a killed run leaves behind is not a lock: the next
writer simply takes it.  If the folder did not exist, it is created; when the
holder fails before writing anything else (a bad option, a bad corpus), the
folder it created is removed again.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from attnlab.errors import UserError

LOCK_NAME = "attnlab.lock"


class FolderLock:
    def __init__(self, folder: str | os.PathLike, option: str = "--out"):
        self.folder, self.option = Path(folder), option
        self.path = self.folder / LOCK_NAME
        self._fd: int | None = None
        self._created_folder = False

    def acquire(self) -> FolderLock:
        if not self.folder.is_dir():
            try:
                self.folder.mkdir(parents=True)
            except OSError as err:
                raise UserError(f"{self.option} {self.folder}: cannot create the folder ({err.strerror})") from None
            self._created_folder = True
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                raise UserError(f"{self.option} {self.folder}: in use by another attnlab process (PID {holder}); "
                                f"wait for it to finish or choose another folder") from None
            try:  # the file we locked is still the one at the path (not unlinked by a finishing holder)
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self, failed: bool = False) -> None:
        """Remove the lock file and unlock; when ``failed`` and nothing else was written, remove the folder
        ``acquire`` created.  (A process that opened the file meanwhile sees it gone and retries.)"""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
            if failed and self._created_folder and not any(self.folder.iterdir()):
                self.folder.rmdir()
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.release(failed=exc_type is not None and not issubclass(exc_type, KeyboardInterrupt))
        return False
