# The image under test plus the real consumer packages, for the offline client tests.
# Built by tests/image/conftest.py: docker buildx build --network=host --allow=network.host
#   --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt --build-arg IMAGE=… --build-arg S3_TEST_TABLE=…
# No "syntax" directive on purpose: builders here cannot pull a frontend image.
ARG IMAGE
# "MODEL=SHA256 …": the generated test checkpoints' hashes, one per s3tokenizer asset of the test manifest.
ARG S3_TEST_TABLE

# clients: openai-harmony, tiktoken, nltk, tqdm and huggingface_hub with their dependencies; s3tokenizer
# without its own (they are torch), its _SHA256S patched to name the test checkpoints:
# its _download accepts a file at <root>/<model>.onnx exactly when the file hashes to
# _SHA256S[model], and no package ships the real checkpoints. The upstream hash each
# replaces is read with bake's own reader of that table.
FROM ${IMAGE} AS clients
ARG S3_TEST_TABLE
# The machine CA comes as a secret so it never lands in a layer; PyPI's TLS needs it here.
RUN --mount=type=secret,id=ca,target=/run/secrets/ca \
    set -eu; \
    python3 -m pip install --no-cache-dir --break-system-packages --cert /run/secrets/ca \
      openai-harmony==0.0.8 tiktoken==0.12.0 tqdm==4.67.1 nltk==3.9.2 huggingface_hub==2.4.0; \
    python3 -m pip install --no-cache-dir --break-system-packages --cert /run/secrets/ca --no-deps \
      s3tokenizer==0.3.0; \
    if python3 -c 'import torch' 2>/dev/null; then echo >&2 "torch got installed; it must never be"; exit 1; fi; \
    init="$(python3 -c 'import importlib.util; print(importlib.util.find_spec("s3tokenizer").origin)')"; \
    test -n "${S3_TEST_TABLE}"; \
    for pair in ${S3_TEST_TABLE}; do \
      model="${pair%%=*}"; sha="${pair#*=}"; \
      upstream="$(PYTHONPATH=/opt/bake/lib python3 -c 'import sys; from bake.consumers import s3tokenizer_models; print(s3tokenizer_models()[sys.argv[1]][1])' "$model")"; \
      test "$(grep -c "${upstream}" "$init")" = 1; \
      sed -i "s/${upstream}/${sha}/" "$init"; \
      grep -q "\"${sha}\"" "$init"; \
    done
