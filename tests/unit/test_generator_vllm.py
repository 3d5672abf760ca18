"""The vLLM generator's pure parts: its config, the Serve config Ragline deploys, the LLMConfig it builds, and how
the Generator reads the LLM's streamed chunks (against a fake handle; the real one runs in tests/integration)."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from app import serving
from app.config import GeneratorConfig, load_config
from app.errors import Unavailable, UserError
from app.rag.engines import Sampling, ServeLLMEngine
from app.rag.protocol import Delta, Finished
from app.storage import Storage
from deployments.llm import SERVER, LLMArgs, build_llm_app, llm_config


@pytest.mark.parametrize(("override", "field"), [
    ("serve.generator.vllm.kv_cache_gib=0", "vllm.kv_cache_gib"),
    ("serve.generator.vllm.kv_cache_gib=1.5", "vllm.kv_cache_gib"),  # vLLM reads whole GiB, and fails on "1.5"
    ("serve.generator.vllm.max_num_seqs=0", "vllm.max_num_seqs"),
    ("serve.generator.vllm.dtype=int3", "vllm.dtype"),
    ("serve.generator.vllm.device=tpu", "vllm.device"),
    ("serve.generator.vllm.reserved_cpus=-1", "vllm.reserved_cpus"),
    ("serve.generator.vllm.cpu_bind=all", "vllm.cpu_bind"),
    ("serve.generator.vllm.cpu_bind=0-1|2-3", "vllm.cpu_bind"),  # one list per worker: one worker here
    ("serve.generator.vllm.gpu_memory_utilization=1.5", "vllm.gpu_memory_utilization"),
    ("serve.generator.vllm.max_model_len=1024", "vllm.max_model_len (1024) is below max_context_tokens"),
    ("serve.generator.vllm.tensor_parallel_size=2", "tensor_parallel_size > 1 needs device gpu"),
    ("serve.generator.max_new_tokens=4000", "max_new_tokens (4000) must be below max_context_tokens"),
    ("serve.generator.engine=openai", "engine openai needs openai.base_url"),
    ("serve.generator.openai.request_timeout_s=0", "openai.request_timeout_s"),
])
def test_bad_generator_settings_are_named_before_anything_deploys(override, field):
    with pytest.raises(ValueError, match=r"serve\.generator") as e:
        load_config(None, [override])
    assert field in str(e.value)


def test_defaults_are_vllm_on_cpu_with_prefix_caching():
    gen = GeneratorConfig()
    vllm = gen.vllm
    assert gen.engine == "vllm" and vllm.device == "cpu" and vllm.enable_prefix_caching and vllm.enforce_eager
    assert vllm.one_process  # vLLM's uni executor: the quicker cold start
    assert gen.context_len == gen.max_context_tokens == 2048
    assert GeneratorConfig(vllm={"max_model_len": 4096}).context_len == 4096


def test_engine_options_are_dotted_under_their_engine():
    cfg = load_config(None, ["serve.generator.vllm.kv_cache_gib=1", "serve.generator.vllm.device=gpu",
                             "serve.generator.openai.api_key_env=MY_KEY"]).serve.generator
    assert cfg.vllm.kv_cache_gib == 1 and cfg.vllm.device == "gpu" and cfg.openai.api_key_env == "MY_KEY"
    assert cfg.vllm.max_num_seqs == 64  # the section's other options keep their defaults
    cfg = GeneratorConfig.model_validate({"engine": "openai", "openai": {"base_url": "http://llm:8000/v1"}})
    assert cfg.openai.base_url == "http://llm:8000/v1"


@pytest.mark.parametrize(("override", "where"), [
    ("serve.generator.kv_cache_gib=1", "kv_cache_gib is an option of the vllm engine: give it as vllm.kv_cache_gib"),
    ("serve.generator.device=gpu", "device is an option of the vllm engine: give it as vllm.device"),
    ("serve.generator.llm_app=x", "llm_app is an option of the vllm engine: give it as vllm.llm_app"),
    ("serve.generator.base_url=http://llm/v1",
     "base_url is an option of the openai engine: give it as openai.base_url"),
])
def test_an_engine_option_at_the_old_flat_place_says_where_it_goes(override, where):
    with pytest.raises(ValueError, match=r"serve\.generator: ") as e:
        load_config(None, [override])
    assert where in str(e.value)


def test_an_unknown_engine_option_is_named_in_its_section():
    with pytest.raises(ValueError, match=r"serve\.generator\.vllm\.kv_cache: Extra inputs are not permitted"):
        load_config(None, ["serve.generator.vllm.kv_cache=1"])


def test_llm_config_on_cpu_and_gpu():
    cpu = llm_config(GeneratorConfig(vllm={"kv_cache_gib": 3, "reserved_cpus": 1, "cpus": 0.5}), "m")
    assert cpu.placement_group_config == {"bundles": [{"CPU": 0.5}]}
    assert cpu.runtime_env == {"env_vars": {"VLLM_CPU_KVCACHE_SPACE": "3", "VLLM_CPU_NUM_OF_RESERVED_CPU": "1",
                                            "VLLM_CPU_OMP_THREADS_BIND": "nobind"}}
    bound = llm_config(GeneratorConfig(vllm={"cpu_bind": "0-1,3"}), "m")
    assert bound.runtime_env["env_vars"]["VLLM_CPU_OMP_THREADS_BIND"] == "0-1,3"
    one = load_config(None, ["serve.generator.vllm.cpu_bind=1"]).serve.generator.vllm  # read as YAML: an int
    assert one.cpu_bind == "1"
    assert cpu.engine_kwargs == {"dtype": "auto", "enforce_eager": True, "max_model_len": 2048,
                                 "max_num_seqs": 64, "enable_prefix_caching": True}
    assert cpu.deployment_config["ray_actor_options"] == {"num_cpus": 0}
    gpu = llm_config(GeneratorConfig(vllm={"device": "gpu", "tensor_parallel_size": 2, "gpu_memory_utilization": 0.8,
                                           "enforce_eager": False, "cpus": 2}), "m")
    assert gpu.placement_group_config == {"bundles": [{"GPU": 1, "CPU": 2}, {"GPU": 1}]}
    assert gpu.engine_kwargs["tensor_parallel_size"] == 2 and gpu.engine_kwargs["gpu_memory_utilization"] == 0.8
    assert not gpu.runtime_env


def deployed(app):
    """(options, bundles, strategy, actor options, init kwargs) of an application's one deployment."""
    d = app._bound_deployment
    r = d._replica_config
    return (d._deployment_config, r.placement_group_bundles, r.placement_group_strategy, r.ray_actor_options,
            r.init_kwargs)


@pytest.mark.parametrize("overrides", [[], ["serve.generator.vllm.device=gpu", "serve.generator.vllm.cpus=2",
                                            "serve.generator.vllm.tensor_parallel_size=2"]])
def test_the_llm_deployment_is_ray_serve_llms_own_built_without_vllm(tmp_path, monkeypatch, overrides):
    from ray.serve._private.replica import _load_deployment_def_from_import_path
    from ray.serve.llm import build_llm_deployment

    from deployments.llm_server import RaglineLLMServer

    # the build task's runtime env, which both pass on to the replica (the real one needs Ray)
    context = type("Context", (), {"runtime_env": {"env_vars": {"APP": "1"}}})
    monkeypatch.setattr("ray.get_runtime_context", lambda: context())
    ours = build_llm_app(LLMArgs(storage=str(tmp_path), overrides=overrides))
    # the replica imports the class (and vLLM) from its import path; the builder does not
    assert ours._bound_deployment.func_or_class == SERVER
    assert _load_deployment_def_from_import_path(SERVER) is RaglineLLMServer
    kwargs = dict(deployed(ours)[4])
    theirs = build_llm_deployment(kwargs.pop("llm_config"), deployment_cls=RaglineLLMServer, bind_kwargs=kwargs,
                                  override_serve_options={"name": "LLM", "max_surge_percent": 100})
    assert deployed(ours) == deployed(theirs)


def test_only_the_llm_replica_imports_vllm():
    """Serve's build task (a new process at every deploy and model swap) imports both builders, and the Generator's
    replica its engine: importing vLLM takes 7-25 s on 2 cores, so only the LLM's replica does."""
    code = ("import sys, deployments.graph, deployments.llm, app.rag.engines; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'vllm'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"


def test_serve_config_fills_both_applications_once(tmp_path):
    storage = Storage(str(tmp_path / "s"))
    keys = tmp_path / "keys"
    keys.write_text("k\n")
    schema = serving.load_serve_config(None, storage, None, ["serve.generator.max_new_tokens=64"],
                                       api_keys_file=str(keys))
    graph, llm = schema.applications
    assert (graph.import_path, llm.import_path) == (serving.GRAPH, serving.LLM)
    for app in (graph, llm):  # the YAML anchor shares one mapping: the overrides are applied once to each
        assert app.args["storage"] == str(storage.local_path())
        assert app.args["overrides"] == ["serve.generator.max_new_tokens=64"]
    assert graph.args["api_keys_file"] == str(keys) and "api_keys_file" not in llm.args
    assert next(d for d in llm.deployments if d.name == "LLM").max_surge_percent == 100


def test_a_remote_cluster_gets_the_config_inline_in_both_applications(tmp_path):
    config = tmp_path / "ragline.yaml"
    config.write_text("serve:\n  generator:\n    max_new_tokens: 99\n")
    schema = serving.load_serve_config(None, Storage(str(tmp_path / "s")), str(config), [], remote=True)
    for app in schema.applications:
        assert app.args["config"] == {"serve": {"generator": {"max_new_tokens": 99}}} and not app.args["config_file"]


def test_the_llm_application_is_left_out_for_other_engines(tmp_path):
    schema = serving.load_serve_config(None, Storage(str(tmp_path / "s")), None,
                                       ["serve.generator.engine=transformers"])
    assert [a.import_path for a in schema.applications] == [serving.GRAPH]


class FakeStream:
    """What `handle.options(stream=True).chat_sse.remote(request)` returns: an async iterator with cancel()."""

    def __init__(self, batches):
        self.batches, self.cancelled = batches, False

    def __aiter__(self):
        return self._gen()

    async def _gen(self):
        for b in self.batches:
            yield b

    def cancel(self):
        self.cancelled = True


class FakeHandle:
    def __init__(self, stream):
        self.stream, self.requests = stream, []

    def options(self, stream):
        assert stream
        return self

    @property
    def chat_sse(self):
        return self

    def remote(self, request):
        self.requests.append(request)
        return self.stream


def chunk(content=None, finish=None, usage=None, choices=True):
    body = {"id": "x", "model": "m", "choices": [{"index": 0, "delta": {"content": content} if content else {},
                                                   "finish_reason": finish}] if choices else []}
    return f"data: {json.dumps(body | ({'usage': usage} if usage else {}))}\n\n"


def engine_with(stream) -> tuple[ServeLLMEngine, FakeHandle]:
    engine = ServeLLMEngine.__new__(ServeLLMEngine)
    handle = FakeHandle(stream)
    engine._llm, engine.model = handle, "configured"
    return engine, handle


async def collect(engine, sampling, limit=None):
    out = []
    gen = engine.stream([{"role": "user", "content": "q"}], sampling)
    async for piece in gen:
        out.append(piece)
        if limit and len(out) == limit:
            await gen.aclose()
            break
    return out


def test_stream_reads_batched_sse_chunks_and_passes_sampling_through():
    stream = FakeStream([[chunk("Zebras"), chunk(" cross")], [chunk(" in July", finish="stop")],
                         [chunk(choices=False, usage={"prompt_tokens": 90, "completion_tokens": 3,
                                                      "total_tokens": 93})], ["data: [DONE]\n\n"]])
    engine, handle = engine_with(stream)
    pieces = asyncio.run(collect(engine, Sampling(max_new_tokens=7, temperature=0.3, top_p=0.8, stop=("\n\n",))))
    assert pieces == [Delta("Zebras"), Delta(" cross"), Delta(" in July"),
                      Finished(finish_reason="stop", prompt_tokens=90, completion_tokens=3, model="m")]
    [req] = handle.requests
    assert (req["max_tokens"], req["temperature"], req["top_p"], req["stop"], req["stream"]) == (7, 0.3, 0.8,
                                                                                             ["\n\n"], True)
    # a finished stream is not cancelled: that would be a ray.cancel round trip on every request
    assert req["stream_options"]["include_usage"] and not stream.cancelled


def test_closing_the_stream_early_cancels_the_llm_call():
    stream = FakeStream([[chunk("a")], [chunk("b")], [chunk("c", finish="length")]])
    engine, _ = engine_with(stream)
    assert asyncio.run(collect(engine, Sampling(8, 0.0, 1.0), limit=1)) == [Delta("a")]
    assert stream.cancelled


def llm_error_response(code: int, message: str):
    from ray.serve.llm.openai_api_models import ErrorResponse

    return ErrorResponse.model_validate({"error": {"message": message, "type": "x", "code": code}})


def llm_refusal(code: int, message: str) -> str:
    """What the LLM replica's `chat_sse` streams for a request vLLM refused before any token."""
    from deployments.llm_server import RaglineLLMServer

    async def chat(request):
        assert request.max_tokens == 8  # validated into vLLM's request there

        async def batches():
            yield [llm_error_response(code, message)]
        return batches()

    async def run():
        body = {"messages": [{"role": "user", "content": "q"}], "max_tokens": 8}
        return [b async for b in RaglineLLMServer.chat_sse(SimpleNamespace(chat=chat), body)]
    [[item]] = asyncio.run(run())
    return item


def test_a_4xx_from_the_llm_is_the_callers_mistake():
    engine, _ = engine_with(FakeStream([[llm_refusal(400, "maximum context length is 2048 tokens")]]))
    with pytest.raises(UserError, match="maximum context length"):
        asyncio.run(collect(engine, Sampling(8, 0.0, 1.0)))


@pytest.mark.parametrize("stream", [
    [[llm_refusal(500, "EngineCore encountered an issue")]],  # refused before any token
    [[chunk("a")], ['data: {"error": {"message": "EngineDeadError", "type": "InternalServerError", "code": 500}}'
                    "\n\n"]],  # the engine died mid-answer
], ids=["before", "mid-stream"])
def test_a_dead_engine_is_unavailable_not_the_callers_mistake(stream):
    """vLLM answers a request its engine cannot serve with a 5xx ErrorResponse, or with an error chunk mid-stream."""
    engine, _ = engine_with(FakeStream(stream))
    with pytest.raises(Unavailable, match="retry") as raised:
        asyncio.run(collect(engine, Sampling(8, 0.0, 1.0)))
    assert not isinstance(raised.value, UserError)


def test_an_engine_dead_error_through_the_handle_is_unavailable():
    """What a request gets while Serve has not yet replaced a replica whose engine died: the LLM replica's chat
    raises vLLM's EngineDeadError, and Ray re-raises it on this side of the handle."""
    from ray.exceptions import RayTaskError
    from vllm.v1.engine.exceptions import EngineDeadError

    class Raising(FakeStream):
        async def _gen(self):
            raise RayTaskError("chat", "traceback", EngineDeadError()).as_instanceof_cause()
            yield

    engine, _ = engine_with(Raising([]))
    with pytest.raises(Unavailable, match="engine has died"):
        asyncio.run(collect(engine, Sampling(8, 0.0, 1.0)))
