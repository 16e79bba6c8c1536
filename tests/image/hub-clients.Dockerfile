# An image with baked Hub repositories plus the Hub's own clients, for the offline Hub tests.
# Built by tests/image/test_hub.py: docker buildx build --network=host --allow=network.host
#   --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt --build-arg IMAGE=…
# No "syntax" directive on purpose: builders here cannot pull a frontend image.
ARG IMAGE

# hub-clients: huggingface_hub, tokenizers and transformers (no torch: tokenizers need none).
FROM ${IMAGE} AS hub-clients
# The machine CA comes as a secret so it never lands in a layer; PyPI's TLS needs it here.
RUN --mount=type=secret,id=ca,target=/run/secrets/ca \
    set -eu; \
    python3 -m pip install --no-cache-dir --break-system-packages --cert /run/secrets/ca \
      huggingface_hub==2.4.0 tokenizers==0.23.3 transformers==5.24.0; \
    if python3 -c 'import torch' 2>/dev/null; then echo >&2 "torch got installed; it must never be"; exit 1; fi
