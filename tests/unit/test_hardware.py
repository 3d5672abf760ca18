"""Hardware detection (app/hardware.py) and the choices made from it: bf16 only where it is native."""

import pytest

from app import hardware
from app.errors import UserError

EPYC_AVX2 = ("AMD EPYC 7B13", {"fpu", "sse4_2", "avx", "avx2", "fma"})
EPYC_BF16 = ("AMD EPYC 9B14", {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16"})
XEON_AMX = ("Intel Xeon Platinum 8480+", {"avx2", "avx512f", "avx512_vnni", "amx_tile", "amx_bf16"})


def hw(cpuinfo, forced=None) -> hardware.Hardware:
    return hardware.read(cpuinfo, forced, cuda=())


def test_levels_from_cpu_flags():
    assert hw(EPYC_AVX2).level == "avx2" and not hw(EPYC_AVX2).cpu_bf16
    assert hw(EPYC_BF16).level == "avx512_bf16" and hw(EPYC_BF16).cpu_bf16
    assert hw(XEON_AMX).level == "avx512_bf16"  # AMX computes bf16 natively too
    assert hw(("Old", {"sse4_2"})).level == "baseline"
    assert hw(EPYC_BF16).flags == ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16")


def test_a_forced_level_hides_what_is_above_it():
    forced = hw(EPYC_BF16, "avx2")
    assert forced.level == "avx2" and forced.flags == ("avx2", "fma") and forced.forced == "avx2"
    assert "(forced avx2)" in forced.summary() and forced.record()["forced"] == "avx2"
    # a held result says which kernel libraries' caps were set beside it
    assert set(forced.record()["hold"]) == {"ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS"}
    assert "hold" not in hw(EPYC_BF16).record()
    assert hardware.forced_level("AVX512") == "avx512" and hardware.forced_level("") is None
    with pytest.raises(UserError, match="RAGLINE_CPU_ISA='sse9'"):
        hardware.forced_level("sse9")


def test_auto_choices_follow_the_cpu_and_explicit_settings_win():
    avx2, bf16 = hw(EPYC_AVX2), hw(EPYC_BF16)
    assert hardware.generator_dtype("auto", "cpu", avx2) == "float32"
    assert hardware.generator_dtype("auto", "cpu", bf16) == "bfloat16"
    assert hardware.generator_dtype("bfloat16", "cpu", avx2) == "bfloat16"  # asked for: emulated, but asked for
    assert hardware.generator_dtype("auto", "gpu", avx2) == "auto"  # vLLM's own choice on a GPU
    assert hardware.choose_precision("auto", "cpu", avx2) == "fp32"
    assert hardware.choose_precision("auto", "cpu", bf16) == "bf16"
    assert hardware.choose_precision("fp32", "cpu", bf16) == "fp32"


def test_the_engines_threads_take_every_core_where_it_is_compute_bound():
    import dataclasses

    avx2, amx = (dataclasses.replace(hw(c), cores=4) for c in (EPYC_AVX2, XEON_AMX))
    assert hardware.generator_threads(0, "float32", avx2) == 4
    assert hardware.generator_threads(0, "bfloat16", avx2) == 4  # emulated bf16: compute bound too
    assert hardware.generator_threads(0, "bfloat16", amx) == 3  # native: one core left to the graph's replicas
    assert hardware.generator_threads(0, "float32", amx) == 4
    assert hardware.generator_threads(0, "bfloat16", dataclasses.replace(amx, cores=1)) == 1
    assert hardware.generator_threads(2, "float32", avx2) == 2  # an explicit count wins
    # what the engine is started with: unbound threads only (bound, vLLM sets its own; on GPU, none)
    assert hardware.generator_thread_env("cpu", "nobind", 0, "float32", avx2) == {"OMP_NUM_THREADS": "4"}
    assert hardware.generator_thread_env("cpu", "0-1", 0, "float32", avx2) == {}
    assert hardware.generator_thread_env("gpu", "nobind", 0, "auto", avx2) == {}
    # what logs, /readyz and `ragline status` say of it
    assert hardware.generator_placement("cpu", "nobind", 0, "float32", avx2) == ", 4 threads"
    assert hardware.generator_placement("cpu", "nobind", 1, "float32", avx2) == ", 1 thread"
    assert hardware.generator_placement("cpu", "0-1", 0, "float32", avx2) == ", threads bound to 0-1"
    assert hardware.generator_placement("gpu", "nobind", 0, "auto", avx2) == ""


def test_a_bf16_index_is_queried_in_fp32_where_bf16_is_emulated():
    from app.models.embedder import query_precision

    assert query_precision("bf16", "cpu", hw(EPYC_BF16)) == "bf16"
    assert query_precision("bf16", "cpu", hw(EPYC_AVX2)) == "fp32"  # built on an AMX node, served on an AVX2 one
    assert query_precision("bf16", "cpu", hw(EPYC_BF16, "avx2")) == "fp32"
    assert query_precision("fp32", "cpu", hw(EPYC_BF16)) == "fp32"


def test_threads_never_exceed_the_cores():
    two = hw(EPYC_AVX2)
    assert two.cores >= 1
    assert hardware.threads(0.2, two) == 1 and hardware.threads(0.75, two) == 1
    assert hardware.threads(1000, two) == two.cores


def test_this_machine_reads():
    here = hardware.detect()
    assert here.cores >= 1 and here.memory_gib > 0 and here.level in hardware.LEVELS
    assert here.summary().startswith(here.cpu)


def test_a_forced_level_holds_the_probes_vllm_picks_its_kernels_by(monkeypatch):
    import torch

    for probe in ("_is_avx512_supported", "_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, probe, getattr(torch.cpu, probe))  # put back after the test
    before = torch.cpu._is_avx512_supported()
    hardware.hold_torch_probes(hw(EPYC_BF16))  # nothing forced: untouched
    assert torch.cpu._is_avx512_supported() == before
    hardware.hold_torch_probes(hw(EPYC_BF16, "avx2"))
    assert not torch.cpu._is_avx512_supported() and not torch.cpu._is_avx512_bf16_supported()
    assert not torch.cpu._is_amx_tile_supported()


def test_vllm_runs_the_probe_hold_in_its_own_processes():
    """vLLM's engine core is a spawned process: only a registered general plugin reaches it."""
    from importlib.metadata import entry_points

    (plugin,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == "ragline_cpu_level"]
    assert plugin.load() is hardware.hold_torch_probes
