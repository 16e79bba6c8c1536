# The image under test plus the clients a harvested job uses, for tests/image/test_harvest.py.
# Built there: docker buildx build --network=host --allow=network.host
#   --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt --build-arg IMAGE=…
# No "syntax" directive on purpose: builders here cannot pull a frontend image.
ARG IMAGE

# harvest-clients: huggingface_hub, tokenizers and transformers (no torch), tiktoken and openai-harmony.
FROM ${IMAGE} AS harvest-clients
# The machine CA comes as a secret so it never lands in a layer; PyPI's TLS needs it here.
RUN --mount=type=secret,id=ca,target=/run/secrets/ca \
    set -eu; \
    python3 -m pip install --no-cache-dir --break-system-packages --cert /run/secrets/ca \
      huggingface_hub==2.4.0 tokenizers==0.23.3 transformers==5.24.0 tiktoken==0.12.0 openai-harmony==0.0.8; \
    if python3 -c 'import torch' 2>/dev/null; then echo >&2 "torch got installed; it must never be"; exit 1; fi
