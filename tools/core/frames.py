"""A frame of a stack, and whether it is the user's code: shared by every reader of stacks (py-spy dumps,
faulthandler, flight-recorder entries, memory-snapshot allocation sites).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

__all__ = ["Frame", "is_library"]


_INSTALLED_PREFIX = re.compile(r"^.*/(?:site-packages|dist-packages|lib/python3\.\d+)/")


@dataclass(frozen=True)
class Frame:
    function: str
    file: str  # as the dump gives it: full path, or py-spy's short package path
    line: int | None
    native: bool = False

    def display(self) -> str:
        file = _INSTALLED_PREFIX.sub("", self.file)  # package-relative, as py-spy shows it; the user's paths stay
        where = file if self.line is None else f"{file}:{self.line}"
        return f"{where} {self.function}"


# Code that is not the user's: installed packages, the standard library, interpreter internals.
_LIBRARY_TOPS = (frozenset(sys.stdlib_module_names) - {"test"}) | {
    "torch", "torchvision", "torchaudio", "functorch", "triton", "numpy", "transformers", "accelerate",
    "deepspeed", "lightning", "pytorch_lightning", "lightning_fabric", "apex", "fairscale", "datasets",
    "safetensors", "huggingface_hub", "vllm", "sglang", "xformers", "flash_attn", "transformer_engine",
    "tqdm", "wandb", "mlflow", "tensorboard", "hydra", "omegaconf",
}
_SITE = re.compile(r"(?:site|dist)-packages/|/lib/python3\.\d+/|^<frozen ")


def is_library(frame: Frame) -> bool:
    if frame.native:
        return True
    file = frame.file.replace("\\", "/")
    if _SITE.search(file):
        return True
    if file.startswith("/"):
        return False  # a full path outside site-packages and the standard library: the user's code
    top = file.split("/", 1)[0].removesuffix(".py")
    return top in _LIBRARY_TOPS
