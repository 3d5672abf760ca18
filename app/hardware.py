"""What this machine computes with, read once: the CPU's model and instruction sets, the cores this process may use,
its memory and CUDA devices. Every component that picks a precision, runtime, dtype or thread count asks here (never
`/proc/cpuinfo` or `torch.cpu._is_*` itself), so one answer explains every choice, and `/readyz`, `ragline status`
and the benchmarks' results files show it.

Why it matters: bf16 is native only with AVX512-BF16 or AMX. Elsewhere (AVX2-only CPUs: many cloud VMs, some of this
project's machines) PyTorch, oneDNN and vLLM emulate it, slower than fp32: vLLM generated 5.9 tokens/s at 8 clients
in bf16 on such a CPU against 18.0 in float32.

`RAGLINE_CPU_ISA=avx2` (or `avx512`) makes detection report no more than that level, so an AVX512-BF16 machine takes
the choices an AVX2 one would; with `envs.CPU_HOLD_AVX2` beside it (`ONEDNN_MAX_CPU_ISA=AVX2
ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2`), PyTorch's and oneDNN's kernels are held to AVX2 too
(docs/guides/configuration.md, "Measuring another CPU"). OpenVINO's MLAS matrix products are not: its release wheels
read no cap for them (`OV_CPU_MAX_ISA` is a debug-build switch).
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass
from typing import Literal

from app import envs
from app.errors import UserError

Level = Literal["baseline", "avx2", "avx512", "avx512_bf16"]
LEVELS: tuple[Level, ...] = ("baseline", "avx2", "avx512", "avx512_bf16")
# The /proc/cpuinfo flags we report, and the level each needs (a forced level hides the flags above it).
FLAGS: dict[str, Level] = {"avx2": "avx2", "fma": "avx2", "avx_vnni": "avx2", "avx512f": "avx512",
                           "avx512bw": "avx512", "avx512vl": "avx512", "avx512_vnni": "avx512",
                           "avx512_bf16": "avx512_bf16", "amx_tile": "avx512_bf16", "amx_bf16": "avx512_bf16"}


@dataclass(frozen=True)
class Hardware:
    cpu: str  # the CPU's model name
    flags: tuple[str, ...]  # those of FLAGS this CPU has (after a forced level)
    cores: int  # CPUs this process may run on (its affinity), not the machine's
    memory_gib: float
    cuda: tuple[str, ...]  # CUDA device names; () without CUDA (or without torch)
    forced: Level | None = None  # RAGLINE_CPU_ISA, when set

    @property
    def level(self) -> Level:
        """The highest vector level: what decides which kernels run fast."""
        if "avx512_bf16" in self.flags or "amx_bf16" in self.flags:
            return "avx512_bf16"
        if "avx512f" in self.flags:
            return "avx512"
        return "avx2" if "avx2" in self.flags else "baseline"

    @property
    def cpu_bf16(self) -> bool:
        """bf16 matmuls run natively on this CPU (AVX512-BF16 or AMX); elsewhere they are emulated, slower than fp32."""
        return self.level == "avx512_bf16"

    def native_bf16(self, device: str) -> bool:
        """bf16 is native on `device` ("cpu", "cuda", "cuda:N"): a CUDA GPU of compute capability 8 or more (checked
        by the caller's torch where it runs), or a CPU with AVX512-BF16 / AMX."""
        if device.startswith("cuda"):
            import torch

            return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
        return self.cpu_bf16

    def summary(self) -> str:
        """One line for logs, the CLI and README captions: 'AMD EPYC, avx512_bf16, 2 cores, 23 GiB'."""
        gpus = f", {len(self.cuda)}x {self.cuda[0]}" if self.cuda else ""
        forced = f" (forced {self.forced})" if self.forced else ""
        return f"{self.cpu}, {self.level}{forced}, {self.cores} cores, {self.memory_gib:.0f} GiB{gpus}"

    def record(self) -> dict[str, object]:
        """What a results file or a status report keeps of it."""
        return {"cpu": self.cpu, "level": self.level, "flags": list(self.flags), "cores": self.cores,
                "memory_gib": round(self.memory_gib, 1), "cuda": list(self.cuda), "forced": self.forced,
                **({"hold": hold_env(self)} if self.forced else {})}


def _cpuinfo() -> tuple[str, set[str]]:
    """(model name, flags) of the first processor in /proc/cpuinfo; ("", set()) where there is none (not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return "", set()
    name, flags = "", set[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not name:
            name = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
        if name and flags:
            break
    return name, flags


def _torch_flags() -> set[str]:
    """The same facts from PyTorch's own CPU probe, where /proc/cpuinfo is missing (macOS, Windows)."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()  # "DEFAULT", "AVX2", "AVX512", "ZVECTOR", "SVE256"...
    flags = {"avx2"} if capability in ("AVX2", "AVX512") else set()
    if capability == "AVX512":
        flags |= {"avx512f", "avx512bw", "avx512vl"}
    if torch.cpu._is_avx512_bf16_supported():
        flags.add("avx512_bf16")
    if torch.cpu._is_amx_tile_supported():
        flags |= {"amx_tile", "amx_bf16"}
    return flags


def _cuda() -> tuple[str, ...]:
    import torch

    if not torch.cuda.is_available():
        return ()
    return tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))


def forced_level(value: str) -> Level | None:
    """RAGLINE_CPU_ISA's level; UserError naming the variable for anything else."""
    if not value:
        return None
    level = value.strip().lower()
    if level not in LEVELS:
        raise UserError(f"RAGLINE_CPU_ISA={value!r}: use one of {', '.join(LEVELS)} (or leave it unset)")
    return level


def read(cpuinfo: tuple[str, set[str]] | None = None, forced: Level | None = None,
         cuda: tuple[str, ...] | None = None) -> Hardware:
    """Hardware from the given facts (tests), or this machine's."""
    name, flags = cpuinfo if cpuinfo is not None else _cpuinfo()
    if not flags and platform.machine().lower() in ("x86_64", "amd64"):
        flags = _torch_flags()
    if forced is not None:
        flags = {f for f in flags if LEVELS.index(FLAGS.get(f, "baseline")) <= LEVELS.index(forced)}
    import psutil

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return Hardware(cpu=name or platform.processor() or platform.machine(),
                    flags=tuple(f for f in FLAGS if f in flags), cores=cores,
                    memory_gib=psutil.virtual_memory().total / 2**30,
                    cuda=_cuda() if cuda is None else cuda, forced=forced)


@functools.cache
def detect() -> Hardware:
    """This machine, read once per process."""
    return read(forced=forced_level(envs.RAGLINE_CPU_ISA))


def hold_torch_probes(hw: Hardware | None = None) -> None:
    """Where RAGLINE_CPU_ISA holds detection below this CPU's level, make PyTorch's CPU probes say the same in this
    process: vLLM's CPU backend asks them which kernel library to load (`vllm._C_AVX2`, `_C_AVX512` or `_C`) and
    which attention and linear kernels to run. Registered as a vLLM general plugin (pyproject.toml), so vLLM runs it
    in each process it starts, its spawned engine core too (seen: `_C_AVX2` loaded there). With ONEDNN_MAX_CPU_ISA
    and ATEN_CPU_CAPABILITY in every process's environment, an AVX2 machine's code paths then run here (at this CPU's
    clock and caches, not an AVX2 one's)."""
    hw = hw or detect()
    if hw.forced is None:
        return
    import torch

    held = [*(["_is_avx512_supported"] if hw.level in ("baseline", "avx2") else []),
            *([] if hw.cpu_bf16 else ["_is_avx512_bf16_supported", "_is_amx_tile_supported"])]
    for probe in held:
        setattr(torch.cpu, probe, lambda: False)


def hold_env(hw: Hardware | None = None) -> dict[str, str]:
    """Where detection is forced to AVX2: each kernel library's cap as this process has it ("" unset), so a results
    file says how much of the machine was held. {} otherwise."""
    hw = hw or detect()
    return dict(envs.CPU_HOLD_ENV) if hw.forced in ("baseline", "avx2") else {}


def threads(num_cpus: float, hw: Hardware | None = None) -> int:
    """Threads for a worker that reserves `num_cpus` of Ray's CPUs: the whole CPUs it reserves (at least one), never
    more than the cores, so actors × threads stays within the cores the reservations add up to."""
    hw = hw or detect()
    return max(1, min(hw.cores, round(num_cpus)))


def choose_precision(wanted: Literal["auto", "fp32", "bf16"], device: str,
                     hw: Hardware | None = None) -> Literal["fp32", "bf16"]:
    """An embedder's or cross-encoder's precision: an explicit one as given; `auto`: bf16 where it is native."""
    if wanted != "auto":
        return wanted
    return "bf16" if (hw or detect()).native_bf16(device) else "fp32"


GeneratorDtype = Literal["auto", "bfloat16", "float16", "float32"]


def generator_dtype(wanted: GeneratorDtype, device: Literal["cpu", "gpu"],
                    hw: Hardware | None = None) -> GeneratorDtype:
    """vLLM's dtype: an explicit one as given. `auto` on CPU: bfloat16 where the CPU has it natively, else float32
    (vLLM's own `auto` keeps a bf16 checkpoint in bf16, emulated there); on GPU vLLM's own `auto` (half precision)."""
    if wanted != "auto" or device == "gpu":
        return wanted
    return "bfloat16" if (hw or detect()).cpu_bf16 else "float32"


def generator_threads(wanted: int, dtype: GeneratorDtype, hw: Hardware | None = None) -> int:
    """OpenMP threads of a CPU vLLM engine that binds none (`cpu_bind: nobind`): `wanted` where given (above 0).
    0: every core where its matrix products are compute bound (float32, or bf16 emulated), all but one (at least
    one) where bf16 is native, which leaves the graph's other replicas a core. On 2 cores, `/v1/query` at 32 clients:
    AVX2 float32, 2 threads 1.50x the tokens/s of 1 (as many as vLLM's binding both cores); AMX bf16, 2 bound
    threads no more than 1."""
    if wanted:
        return wanted
    hw = hw or detect()
    return max(1, hw.cores - 1) if dtype == "bfloat16" and hw.cpu_bf16 else hw.cores


def generator_thread_env(device: Literal["cpu", "gpu"], cpu_bind: str, threads: int, dtype: GeneratorDtype,
                         hw: Hardware | None = None) -> dict[str, str]:
    """The OMP_NUM_THREADS a CPU vLLM engine that binds none is started with (`generator_threads`); {} on GPU, or
    where vLLM binds a thread to each core `cpu_bind` names."""
    if device == "gpu" or cpu_bind != "nobind":
        return {}
    return {"OMP_NUM_THREADS": str(generator_threads(threads, dtype, hw))}


def generator_placement(device: Literal["cpu", "gpu"], cpu_bind: str, threads: int, dtype: GeneratorDtype,
                        hw: Hardware | None = None) -> str:
    """How a vLLM engine's threads run, for logs, `/readyz` and `ragline status`: ", 2 threads" (unbound), ", threads
    bound to 0-1"; "" on GPU."""
    if device == "gpu":
        return ""
    if cpu_bind != "nobind":
        return f", threads bound to {cpu_bind}"
    n = int(generator_thread_env(device, cpu_bind, threads, dtype, hw)["OMP_NUM_THREADS"])
    return f", {n} thread{'s' if n > 1 else ''}"
