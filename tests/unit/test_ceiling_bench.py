"""The pure parts of the benchmark against bare vLLM and Ray Serve LLM (benchmarks/ceiling_bench.py): that each side
gets the engine options Ragline's LLM application uses, how repeats are summarised and compared, and its table."""

import pytest
from ray.serve.llm import LLMConfig

from app import hardware
from app.config import GeneratorConfig
from benchmarks import readme_tables
from benchmarks.ceiling_bench import MODEL_ID, ratios, serve_llm_app, summarise, vllm_command, vllm_env
from deployments.llm import llm_config


def point(tps: float, ttft: float, stages: dict[str, float] | None = None) -> dict[str, object]:
    p: dict[str, object] = {"tokens_per_s": tps, "ttft_p50_ms": ttft, "ttft_p95_ms": ttft * 2, "latency_p50_ms": 900,
                            "latency_p95_ms": 1000, "wall_s": 3.0, "completion_tokens": 32, "prompt_tokens": 250}
    return p | ({"stages_p50_ms": stages} if stages else {})


def run(tps: float, ttft: float, cold: float, stages: dict[str, float] | None = None) -> dict[str, object]:
    return {"x1": point(tps, ttft, stages), "x8": point(tps * 3, ttft * 4, stages),
            "x32": point(tps * 4, ttft * 16, stages), "cold_start_s": cold}


def test_serve_llm_and_bare_vllm_get_the_engine_options_ragline_serves_with():
    gen = GeneratorConfig(max_new_tokens=32, stop=[])
    ours = llm_config(gen, "label").engine_kwargs | {"dtype": "float32"}
    app = serve_llm_app(gen, "/models/smol", "float32")
    assert app["import_path"] == "ray.serve.llm:build_openai_app"
    theirs = LLMConfig.model_validate(app["args"]["llm_configs"][0])  # what Serve LLM's builder will validate
    assert theirs.engine_kwargs == ours
    assert theirs.model_id == MODEL_ID
    assert (theirs.runtime_env or {})["env_vars"]["VLLM_CPU_KVCACHE_SPACE"] == str(gen.vllm.kv_cache_gib)
    cmd = vllm_command(gen, "/models/smol", "float32", 9000)
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(cmd[3::2], cmd[4::2], strict=False))
    assert flags["--model"] == "/models/smol"
    assert flags["--dtype"] == "float32" and flags["--max-model-len"] == str(gen.context_len)
    assert flags["--max-num-seqs"] == str(gen.vllm.max_num_seqs) and flags["--served-model-name"] == MODEL_ID
    assert "--enforce-eager" in cmd and "--enable-prefix-caching" in cmd
    # every side's engine runs the threads Ragline's LLM replica gives its own
    threads = str(hardware.generator_threads(gen.vllm.threads, "float32"))
    assert "uni" not in cmd and vllm_env(gen.vllm, "float32", False)["OMP_NUM_THREADS"] == threads
    assert (theirs.runtime_env or {})["env_vars"]["OMP_NUM_THREADS"] == threads
    # vllm-uni: one process, as Ragline's engine
    uni = vllm_command(gen, "/models/smol", "float32", 9000, one_process=True)
    assert uni[uni.index("--distributed-executor-backend") + 1] == "uni"
    assert vllm_env(gen.vllm, "float32", True) == {**vllm_env(gen.vllm, "float32", False),
                                                   "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    bound = gen.vllm.model_copy(update={"cpu_bind": "0-1"})
    assert "OMP_NUM_THREADS" not in vllm_env(bound, "float32", True)  # VLLM_CPU_OMP_THREADS_BIND says the threads


def test_repeats_are_summarised_by_their_median_and_ragline_is_compared_with_each_other_side():
    runs = [run(10, 300, 40, {"retrieve": 20, "generate": 300}), run(12, 200, 50, {"retrieve": 10, "generate": 200}),
            run(11, 250, 45, {"retrieve": 30, "generate": 250})]
    s = summarise(runs)
    assert s["cold_start_s"] == 45 and s["x1"]["tokens_per_s"] == 11 and s["x32"]["tokens_per_s"] == 44
    assert s["x1"]["stages_p50_ms"] == {"retrieve": 20, "generate": 250}
    sides = {"ragline": s, "vllm": summarise([run(12, 230, 30)] * 3)}
    r = ratios(sides)
    assert r["tokens_per_s_vs_vllm_x32"] == pytest.approx(44 / 48)
    assert r["ttft_p50_ms_minus_vllm_x1"] == pytest.approx(20)
    assert not any("serve-llm" in k for k in r)  # a side not measured is no ratio
    assert ratios({"vllm": sides["vllm"]}) == {}
    mp = ratios({**sides, "ragline-mp": summarise([run(13, 240, 50)] * 3)})
    assert mp["ragline-mp_tokens_per_s_vs_vllm_x32"] == pytest.approx(52 / 48)  # each Ragline side against vLLM,
    assert mp["tokens_per_s_vs_vllm_x32"] == r["tokens_per_s_vs_vllm_x32"]  # not against each other
    assert not any(k.startswith("tokens_per_s_vs_ragline") for k in mp)


def test_the_ceiling_table_shows_every_side_the_goal_ratio_and_where_ragline_spends_its_time():
    sides = {"ragline": summarise([run(11, 250, 45, {"retrieve": 20, "generate": 230})]),
             "serve-llm": summarise([run(12, 235, 35)]), "vllm": summarise([run(12, 230, 30)])}
    r = {"date": "2026-11-28", "command": "python benchmarks/ceiling_bench.py", "model": "SmolLM2-135M-Instruct",
         "dtype": "bfloat16", "max_tokens": 32, "repeats": 1, "clients": [1, 8, 32], "cpus": 2,
         "engine": {"max_model_len": 2048, "max_num_seqs": 64, "enforce_eager": True, "VLLM_CPU_KVCACHE_SPACE": "2",
                    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"},
         "versions": {"vllm": "0.32.0", "ray": "2.60.0"}, "sides": sides, "ratios": ratios(sides)}
    table = readme_tables.ceiling_table(r, "`x.json`")
    assert table.count("| Ragline `/v1/chat/completions` (RAG) |") == 3 and table.count("| `vllm serve` |") == 3
    assert "| Ray Serve LLM OpenAI app | 32 | 48.0 |" in table
    assert "**0.92x** tokens/s (goal ≥ 0.9x); TTFT at 1 client +20 ms" in table
    assert "retrieve 20, generate 230." in table and "multiprocess" not in table
    sides["ragline-mp"] = summarise([run(13, 240, 50)])
    table = readme_tables.ceiling_table({**r, "sides": sides, "ratios": ratios(sides)}, "`x.json`")
    assert table.count("| Ragline `/v1/chat/completions` (RAG), vLLM's multiprocess executor |") == 3
    assert "With vLLM's multiprocess executor (`ragline-mp`): **1.08x**, TTFT +10 ms." in table
