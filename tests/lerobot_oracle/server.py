"""One long-lived interpreter of the reference venv that runs the oracle scripts next to it on request, so that
lerobot and torch are imported once per test session instead of once per check (about 10-15 s of CPU each).

Run with the reference venv's python by tests/lerobot_oracle/__init__.py, never imported by lerodoc or its tests.
Requests come on stdin, one JSON object per line: {"script": path, "args": [...], "cwd": dir, "scratch": dir}.
The script runs as __main__ (runpy), its stdout and stderr captured; the reply is one JSON line
{"returncode", "stdout", "stderr"} on the file descriptor given as argv[1]. Everything the process itself prints
goes to its stderr, so a library writing to fd 1 cannot corrupt the replies. Each request gets its own Hugging
Face datasets cache (`scratch`/datasets), as a fresh process would: a dataset rewritten at the same path is
never read from an older request's arrow cache.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import sys
import traceback

os.environ["HF_HUB_OFFLINE"] = "1"


def serve(reply_fd: int) -> None:
    import datasets.config  # the heavy imports, once
    import lerobot.datasets.lerobot_dataset  # noqa: F401

    replies = os.fdopen(reply_fd, "w")
    home = os.getcwd()
    for line in sys.stdin:
        request = json.loads(line)
        datasets.config.HF_DATASETS_CACHE = os.path.join(request["scratch"], "datasets")
        out, err, code = io.StringIO(), io.StringIO(), 0
        saved_argv, saved_path = sys.argv, list(sys.path)
        sys.argv = [request["script"], *request["args"]]
        try:
            os.chdir(request.get("cwd") or home)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                runpy.run_path(request["script"], run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - a script's failure is its reply, the server goes on
            err.write(traceback.format_exc())
            code = 1
        finally:
            sys.argv, sys.path[:] = saved_argv, saved_path
            os.chdir(home)
        replies.write(json.dumps({"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()}) + "\n")
        replies.flush()


if __name__ == "__main__":
    fd = int(sys.argv[1])
    os.dup2(2, 1)          # stray writes to fd 1 land in stderr
    serve(fd)
