"""chiplet_fa: FlashAttention-2 with workgroups mapped so each head's K/V stays in one L2 domain."""
import torch  # noqa: F401  (first: it loads libtorch_cpu.so, the C shim _C links against and does not locate itself)

try:
    from . import _C  # noqa: F401  (registers torch.ops.chiplet_fa.*)
except ImportError as exc:  # pragma: no cover - message for a source checkout without a build
    raise ImportError(
        "chiplet_fa._C is not built. Install with `pip install --no-build-isolation .` and run "
        "from outside the source tree (or build in place with "
        "`python setup.py build_ext --inplace`)."
    ) from exc

from . import _ops  # noqa: F401,E402  (fake kernels)
from . import _autograd  # noqa: F401,E402  (backward formulas)
from . import emulate  # noqa: E402  (the emulated CDNA3 backend, when built)
from .build import build_info, kernel_path  # noqa: E402
from .flash_api import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,  # noqa: E402
                        flash_attn_varlen_func, flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func,
                        flash_attn_with_kvcache)
from .interface import attention, scaled_dot_product_attention  # noqa: E402
from .locality import explain  # noqa: E402
from .mapping import MAPPINGS, longest_first_section_rows, map_workgroups, num_l2_domains  # noqa: E402
from .version import __version__  # noqa: E402

__all__ = ["attention", "scaled_dot_product_attention", "flash_attn_func", "flash_attn_varlen_func",
           "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func", "flash_attn_varlen_qkvpacked_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache", "explain", "map_workgroups",
           "longest_first_section_rows", "num_l2_domains", "MAPPINGS", "build_info", "kernel_path", "__version__"]
