"""Let torchvision import next to a CPU-only torch (written by lerodoc's scripts/zoo-venv.sh).

The registry's torchvision wheels link libc10_cuda.so, which the CPU torch wheel lacks, so
torchvision's C++ ops never load and `import torchvision` then fails in _meta_registrations
(`operator torchvision::nms does not exist`). Defining the schemas of those ops first lets the
import finish; lerobot's dataset code uses none of the C++ ops.
"""

import importlib.abc
import sys


class _Shim(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torchvision":
            return None
        sys.meta_path.remove(self)
        import ctypes
        import importlib.util

        import torch

        spec = importlib.util.find_spec("torchvision")
        so = next(iter(__import__("glob").glob(spec.submodule_search_locations[0] + "/_C*.so")), None)
        try:
            if so:
                ctypes.CDLL(so)
        except OSError:
            for op in ("nms", "qnms"):   # the ops _meta_registrations registers unconditionally
                try:
                    torch.library.define(f"torchvision::{op}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
                except Exception:  # noqa: BLE001 - already defined
                    pass
        return None


sys.meta_path.insert(0, _Shim())
