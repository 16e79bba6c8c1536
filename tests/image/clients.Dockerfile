# The image under test plus the real consumer packages, for the offline client tests.
# Built by tests/image/conftest.py: docker buildx build --network=host --allow=network.host
#   --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt --build-arg IMAGE=… --build-arg S3_TEST_SHA256=…
# No "syntax" directive on purpose: builders here cannot pull a frontend image.
ARG IMAGE
# s3tokenizer 0.3.0's own sha256 for speech_tokenizer_v3_25hz, and the generated test checkpoint's.
ARG S3_UPSTREAM_SHA256=23236a74175dbdda47afc66dbadd5bcb41303c467a57c261cb8539ad9db9208d
ARG S3_TEST_SHA256

# clients: openai-harmony, tiktoken and tqdm with their dependencies; s3tokenizer without
# its own (they are torch), its table patched to name the test checkpoint.
FROM ${IMAGE} AS clients
ARG S3_UPSTREAM_SHA256
ARG S3_TEST_SHA256
# The machine CA comes as a secret so it never lands in a layer; PyPI's TLS needs it here.
RUN --mount=type=secret,id=ca,target=/run/secrets/ca \
    set -eu; \
    python3 -m pip install --no-cache-dir --break-system-packages --cert /run/secrets/ca \
      openai-harmony==0.0.8 tiktoken==0.12.0 tqdm==4.67.1; \
    python3 -m pip install --no-cache-dir --break-system-packages --cert /run/secrets/ca --no-deps \
      s3tokenizer==0.3.0; \
    if python3 -c 'import torch' 2>/dev/null; then echo >&2 "torch got installed; it must never be"; exit 1; fi; \
    init="$(python3 -c 'import importlib.util; print(importlib.util.find_spec("s3tokenizer").origin)')"; \
    test "$(grep -c "${S3_UPSTREAM_SHA256}" "$init")" = 1; \
    sed -i "s/${S3_UPSTREAM_SHA256}/${S3_TEST_SHA256}/" "$init"; \
    grep -q "\"${S3_TEST_SHA256}\"" "$init"
