"""Kernel timings of the device check (`bench/device_kernels.py`) with torch: GEMMs (bf16
and FP8 through ``torch._scaled_mm``), a sustained GEMM soak with the SM clock and power
from pynvml, eager launch loops, memory-bound kernels and scaled-dot-product attention.

Timing follows the MAMF finder (Bekman, ml-engineering ``compute/accelerator/benchmarks/
mamf-finder.py``): warm-up calls, then the mean of back-to-back timed repetitions between
two CUDA events (``time.perf_counter`` and no events on a CPU), operands drawn at random.
The repetitions are sized to `TimingPlan.target_s` from one call timed after the warm-ups.
A CPU run checks the structure of the output, not the machine: it runs on one thread, since
torch's worker threads spin-wait for milliseconds on a host whose cores are shared.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from device_shapes import fp8_fast_accum

SDPA_BACKENDS = ("flash", "cudnn", "efficient")
"""Scaled-dot-product-attention backends timed, by the name the records carry."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TimingPlan:
    """How many calls one measurement makes."""

    warmup: int
    """Untimed calls first."""
    target_s: float
    """Seconds the timed repetitions aim at."""
    min_reps: int
    max_reps: int


@dataclass(frozen=True, kw_only=True, slots=True)
class SoakWindow:
    """One window of the sustained GEMM loop."""

    end_s: float
    """Seconds from the start of the soak to the end of the window."""
    flops_per_s: float
    sm_clock_mhz: float | None
    """SM clock read by pynvml while the window's kernels ran; None without pynvml."""
    power_w: float | None


def _backend(name: str) -> Any:
    from torch.nn.attention import SDPBackend

    return {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }[name]


class TorchRunner:
    """Times kernels on ``device`` (``cuda`` or ``cpu``)."""

    def __init__(self, device: str, plan: TimingPlan, seed: int = 0) -> None:
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda and not torch.cuda.is_available():
            raise RuntimeError(
                f"--device cuda: torch {torch.__version__} sees no CUDA device; run on a GPU "
                "machine, or pass --device cpu to check the output on this one"
            )
        self.plan = plan
        torch.manual_seed(seed)
        if not self.cuda:
            torch.set_num_threads(1)
        self._nvml = _nvml_handle() if self.cuda else None

    def describe(self) -> dict[str, object]:
        """Device name, torch and CUDA versions, whether pynvml reads the clocks."""
        name = torch.cuda.get_device_name(self.device) if self.cuda else "cpu"
        return {
            "device": self.device.type,
            "device_name": name,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "pynvml": self._nvml is not None,
        }

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def mean_s(self, fn: Callable[[], object]) -> float:
        """Mean seconds of ``fn`` over timed repetitions (module docstring)."""
        plan = self.plan
        for _ in range(plan.warmup):
            fn()
        self.sync()
        start = time.perf_counter()
        fn()
        self.sync()
        once = max(time.perf_counter() - start, 1e-7)
        reps = min(max(int(plan.target_s / once), plan.min_reps), plan.max_reps)
        if not self.cuda:
            start = time.perf_counter()
            for _ in range(reps):
                fn()
            return (time.perf_counter() - start) / reps
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3 / reps

    def fp8_unsupported(self) -> str | None:
        """Why FP8 GEMMs cannot run here, or None."""
        if not self.cuda:
            return "fp8 GEMMs need a CUDA device; this run is on the cpu"
        if not hasattr(torch, "_scaled_mm"):
            return f"torch {torch.__version__} has no torch._scaled_mm"
        major, minor = torch.cuda.get_device_capability(self.device)
        if (major, minor) < (8, 9):
            return f"compute capability {major}.{minor} has no FP8 tensor cores (needs 8.9+)"
        return None

    def gemm_call(
        self, m: int, n: int, k: int, dtype: str, fast_accum: bool = False
    ) -> Callable[[], object]:
        """One (m x k) @ (k x n) GEMM on random operands, the second operand column-major
        (``nn.Linear``'s layout, the one ``torch._scaled_mm`` requires); FP8 as e4m3 with
        per-tensor fp32 scales and a bf16 output, with fast accumulation when
        ``fast_accum`` (`fp8_fast_accum`)."""
        a = torch.randn(m, k, device=self.device, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=self.device, dtype=torch.bfloat16)
        if dtype != "fp8":
            b = w.t()
            return lambda: torch.matmul(a, b)
        a8, b8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn).t()
        scale = torch.ones((), device=self.device, dtype=torch.float32)
        return lambda: torch._scaled_mm(
            a8, b8, scale, scale, out_dtype=torch.bfloat16, use_fast_accum=fast_accum
        )

    def gemm_s(self, m: int, n: int, k: int, dtype: str, pass_name: str = "forward") -> float:
        """Mean seconds of one GEMM of ``pass_name`` (`gemm_call`)."""
        return self.mean_s(self.gemm_call(m, n, k, dtype, fp8_fast_accum(pass_name)))

    def soak(
        self, m: int, n: int, k: int, dtype: str, duration_s: float, window_s: float
    ) -> list[SoakWindow]:
        """The GEMM back to back for ``duration_s``, one `SoakWindow` per ``window_s``: the
        window's calls are queued, the clock and power read while they run, then waited
        for (the only host gap is one synchronization per window)."""
        call = self.gemm_call(m, n, k, dtype, fp8_fast_accum("forward"))
        per_window = max(int(window_s / self.mean_s(call)), 1)
        flops = 2.0 * m * n * k * per_window
        windows: list[SoakWindow] = []
        start = time.perf_counter()
        while time.perf_counter() - start < duration_s:
            t0 = time.perf_counter()
            for _ in range(per_window):
                call()
            clock, power = _nvml_read(self._nvml)
            self.sync()
            elapsed = time.perf_counter() - t0
            windows.append(
                SoakWindow(
                    end_s=time.perf_counter() - start,
                    flops_per_s=flops / elapsed,
                    sm_clock_mhz=clock,
                    power_w=power,
                )
            )
        return windows

    def launch_s(self, launches: int) -> float:
        """Seconds per launch of ``launches`` in-place adds on a 16-element tensor, one
        synchronization at the end (the device idles between kernels)."""
        x = torch.zeros(16, device=self.device)
        x.add_(1.0)
        self.sync()
        start = time.perf_counter()
        for _ in range(launches):
            x.add_(1.0)
        self.sync()
        return (time.perf_counter() - start) / launches

    def expert_launch_s(self, experts: int, rows: int, n: int, k: int, launches: int) -> float:
        """Seconds per launch of a loop of ``experts`` matmuls of ``rows`` rows, each against
        its own (k x n) weight, as TE's ``GroupedLinear`` issues one GEMM per expert;
        repeated to about ``launches`` launches, one synchronization at the end."""
        x = torch.randn(experts, rows, k, device=self.device, dtype=torch.bfloat16)
        w = torch.randn(experts, n, k, device=self.device, dtype=torch.bfloat16)
        rounds = max(launches // experts, 1)
        for e in range(experts):
            torch.matmul(x[e], w[e].t())
        self.sync()
        start = time.perf_counter()
        for _ in range(rounds):
            for e in range(experts):
                torch.matmul(x[e], w[e].t())
        self.sync()
        return (time.perf_counter() - start) / (rounds * experts)

    def expert_loop_s(self, experts: int, rows: int, n: int, k: int) -> tuple[float, float]:
        """(loop, one) mean seconds: ``experts`` matmuls of ``rows`` rows against their own
        weights, and one GEMM of experts x rows rows against one weight."""
        x = torch.randn(experts, rows, k, device=self.device, dtype=torch.bfloat16)
        w = torch.randn(experts, n, k, device=self.device, dtype=torch.bfloat16)

        def loop() -> None:
            for e in range(experts):
                torch.matmul(x[e], w[e].t())

        flat, w0 = x.reshape(experts * rows, k), w[0].t()
        return self.mean_s(loop), self.mean_s(lambda: torch.matmul(flat, w0))

    def memory_s(self, kind: str, tensor_bytes: int) -> float:
        """Mean seconds of a device copy (``copy``: read and write ``tensor_bytes``) or an
        element-wise add of two tensors into a third (``add``: two reads, one write)."""
        numel = tensor_bytes // 2
        a = torch.randn(numel, device=self.device, dtype=torch.bfloat16)
        out = torch.empty_like(a)
        if kind == "copy":
            return self.mean_s(lambda: out.copy_(a))
        b = torch.randn_like(a)
        return self.mean_s(lambda: torch.add(a, b, out=out))

    def attention_s(
        self, backend: str, heads: int, kv_heads: int, seq: int, head_dim: int, backward: bool
    ) -> tuple[float, str]:
        """(mean seconds, how GQA ran) of causal bf16 SDPA on ``backend``, forward or
        forward and backward. GQA runs with ``enable_gqa``; a backend that refuses it runs
        on keys and values expanded to every head (``expanded``)."""
        import torch.nn.functional as F
        from torch.nn.attention import sdpa_kernel

        def make(kv: int) -> Callable[[], object]:
            shape = (1, heads, seq, head_dim)
            q = torch.randn(shape, device=self.device, dtype=torch.bfloat16)
            k = torch.randn(1, kv, seq, head_dim, device=self.device, dtype=torch.bfloat16)
            v = torch.randn_like(k)
            q, k, v = (t.requires_grad_(backward) for t in (q, k, v))
            grad = torch.randn(shape, device=self.device, dtype=torch.bfloat16)

            def call() -> object:
                out = F.scaled_dot_product_attention(
                    q, k, v, is_causal=True, enable_gqa=kv != heads
                )
                return out.backward(grad) if backward else out

            return call

        with sdpa_kernel([_backend(backend)]):
            try:
                return self.mean_s(make(kv_heads)), "enable_gqa"
            except RuntimeError:
                if kv_heads == heads:
                    raise
            return self.mean_s(make(heads)), "expanded"

    def release(self) -> None:
        """Return cached device memory after a failed measurement."""
        if self.cuda:
            torch.cuda.empty_cache()


def _nvml_handle() -> Any:
    try:
        import pynvml

        pynvml.nvmlInit()
        index = torch.cuda.current_device()
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None


def _nvml_read(handle: Any) -> tuple[float | None, float | None]:
    """(SM clock MHz, power W) of ``handle``; (None, None) without pynvml."""
    if handle is None:
        return None, None
    import pynvml

    try:
        clock = float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
        power = pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3
    except pynvml.NVMLError:
        return None, None
    return clock, power
