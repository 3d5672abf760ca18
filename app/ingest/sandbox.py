"""Parse documents (PDF, Office, e-mail, images) in a child process that one hostile file cannot stall or sink.

Ray Data has no per-row timeout, and its memory killer retries a task, so a parser that hangs or balloons on one
file would stall or fail the whole run. Each parse task instead hands such files, one at a time, to a long-lived
child process (`python -m app.ingest.sandbox`) that caps its own address space (RLIMIT_AS, which the Tesseract
processes it starts inherit) and runs in a session of its own: past `timeout_s` the parent kills the whole process
group, and a child that dies (over its memory, or a crash in C code) is replaced. Either way the file is
quarantined with the reason and the next file gets a fresh child. One file at a time per child also keeps PDFium,
which is not thread-safe, on one thread.

The protocol is length-prefixed frames on the child's stdin and stdout: a JSON header and the file's bytes in, a
JSON reply out. JSON, not pickle: the child handles hostile input, and what it sends back must not be able to run
code in the parent.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import struct
import subprocess
import sys
import time
from typing import IO, Any

from app.config import DocumentsConfig
from app.ingest.parse import Doc, Unreadable

_LEN = struct.Struct(">Q")  # a frame's length in bytes


class Sandbox:
    """One child process parsing one file at a time; started on first use, restarted after a kill."""

    def __init__(self, cfg: DocumentsConfig):
        self.cfg = cfg
        self.proc: subprocess.Popen[bytes] | None = None

    def parse(self, fmt: str, source: str, data: bytes) -> list[Doc]:
        """The documents of one file; raises Unreadable with the reason (the parser's, or the limit it broke)."""
        proc = self._child()
        assert proc.stdin is not None and proc.stdout is not None
        header = json.dumps({"fmt": fmt, "source": source, "cfg": self.cfg.model_dump()}).encode()
        deadline = time.monotonic() + self.cfg.timeout_s
        try:
            _write(proc.stdin, header)
            _write(proc.stdin, data)
            reply = _read(proc.stdout, deadline)
        except BrokenPipeError:
            reply = None
        if reply is None:
            raise Unreadable(self._kill(timed_out=time.monotonic() >= deadline))
        out = json.loads(reply)
        if out["status"] != "ok":
            if out["status"] == "memory":
                self._kill(timed_out=False)  # a MemoryError can leave a library half-initialised: start afresh
            raise Unreadable(out["reason"])
        docs: list[Doc] = out["docs"]
        return docs

    def close(self) -> None:
        if self.proc is not None:
            self._kill(timed_out=False)

    def _child(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            # Its own session (and process group), so a kill reaches the Tesseract it started too; one OpenMP
            # thread for Tesseract, since Ray runs one task per core.
            env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
            self.proc = subprocess.Popen([sys.executable, "-m", "app.ingest.sandbox", str(self.cfg.memory_mb)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
                                         env=env)
        return self.proc

    def _kill(self, timed_out: bool) -> str:
        """Kills the child's process group; returns why the file was lost."""
        proc = self.proc
        assert proc is not None
        self.proc = None
        with contextlib.suppress(ProcessLookupError):  # the group is gone already (the child died on its own)
            os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
        if timed_out:
            return f"parsing took longer than ingest.documents.timeout_s ({self.cfg.timeout_s:g} s); stopped"
        if code in (-signal.SIGKILL, -signal.SIGSEGV, -signal.SIGABRT, -signal.SIGBUS):
            return (f"its parser died ({signal.Signals(-code).name}), likely over ingest.documents.memory_mb "
                    f"({self.cfg.memory_mb} MiB)")
        return f"its parser exited with status {code}"


def _write(f: IO[bytes], payload: bytes) -> None:
    f.write(_LEN.pack(len(payload)))
    f.write(payload)
    f.flush()


def _read(f: IO[bytes], deadline: float | None = None) -> bytes | None:
    """One frame, or None at end of file or past `deadline` (time.monotonic())."""
    head = _read_exactly(f, _LEN.size, deadline)
    return None if head is None else _read_exactly(f, _LEN.unpack(head)[0], deadline)


def _read_exactly(f: IO[bytes], n: int, deadline: float | None) -> bytes | None:
    fd, chunks, got = f.fileno(), [], 0
    while got < n:
        if deadline is not None and not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            return None
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _serve(limit_mb: int) -> None:
    """The child: caps its own memory, then parses frames until its stdin closes."""
    import resource

    limit = limit_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # Replies go to a private copy of stdout; fd 1 becomes stderr, so a library that prints cannot corrupt them.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    from app.ingest.documents import parse_document

    while (header := _read(sys.stdin.buffer)) is not None:
        request: dict[str, Any] = json.loads(header)
        data = _read(sys.stdin.buffer)
        if data is None:
            return
        cfg = DocumentsConfig.model_validate(request["cfg"])
        # If the parent is gone (its stdin would say so only after this file), the alarm still ends a hang.
        signal.alarm(int(cfg.timeout_s) + 10)
        reply: dict[str, Any]
        try:
            reply = {"status": "ok", "docs": parse_document(request["fmt"], request["source"], data, cfg)}
        except Unreadable as e:
            reply = {"status": "unreadable", "reason": str(e)}
        except MemoryError:
            reply = {"status": "memory",
                     "reason": f"parsing needed more than ingest.documents.memory_mb ({limit_mb} MiB)"}
        except RecursionError:
            reply = {"status": "unreadable", "reason": "nested too deeply to parse"}
        except Exception as e:  # a parser bug on one file must not take the others with it: report it as the reason
            reply = {"status": "error", "reason": f"{type(e).__name__} while parsing: {str(e)[:500]}"}
        signal.alarm(0)
        _write(out, json.dumps(reply).encode())
        if reply["status"] == "memory":
            return


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
