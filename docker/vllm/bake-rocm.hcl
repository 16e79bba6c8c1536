# bake's overlay for vLLM's ROCm build: the one file bake provides. With it, vLLM's own
# docker/docker-bake-rocm.hcl and docker/ci-rocm.hcl stay as they are:
#
#   docker buildx bake -f docker/docker-bake-rocm.hcl -f docker/ci-rocm.hcl \
#     -f bake-rocm.hcl ci-base-rocm-ci
#
# It adds, on _common-rocm (so on every ROCm target):
#   - the named context bake-assets: the content-addressed assets image that
#     `bake build --assets-image REPO` publishes as REPO:$(bake manifest digest);
#   - the named context bake-runtime: FROM scratch, holding tini, bake-entrypoint and
#     bake (bake's `runtime` target, published once per bake release);
#   - the label dev.bake.assets.manifest-digest, which `bake.testing` checks against the
#     image's bake.lock.json;
# and it folds the manifest digest into ci_base's content hash, so a manifest change
# rebuilds ci_base and nothing else does. The Dockerfile gains three lines in ci_base:
#   COPY --link --from=bake-assets / /
#   COPY --link --from=bake-runtime / /
#   ENTRYPOINT ["tini", "--", "bake-entrypoint"]

variable "BAKE_ASSETS_REPO" {
  description = "Repository of the assets image, as given to `bake build --assets-image`."
  default     = ""
  validation {
    condition     = BAKE_ASSETS_REPO != ""
    error_message = "Set BAKE_ASSETS_REPO to the repository `bake build --assets-image REPO` publishes to."
  }
}

variable "BAKE_ASSETS_DIGEST" {
  description = "`bake manifest digest` of the manifest: the assets image's tag, and the label."
  default     = ""
  validation {
    condition     = can(regex("^[0-9a-f]{64}$", BAKE_ASSETS_DIGEST))
    error_message = "Set BAKE_ASSETS_DIGEST=$(bake manifest digest --manifest YOUR_MANIFEST)."
  }
}

variable "BAKE_RUNTIME_IMAGE" {
  description = "bake's runtime image (tini, bake-entrypoint, bake), e.g. REGISTRY/bake-runtime:VERSION."
  default     = ""
  validation {
    condition     = BAKE_RUNTIME_IMAGE != ""
    error_message = "Set BAKE_RUNTIME_IMAGE to the image bake's `runtime` target was pushed as."
  }
}

variable "CI_BASE_CONTENT_HASH" {
  description = "vLLM's hash of the files that decide ci_base; the overlay adds the manifest digest to it."
  default     = ""
}

# ci_base's content hash: vLLM's own, with the manifest digest as one more input.
function "bake_content_hash" {
  params = [files_hash]
  result = files_hash == "" ? "" : sha256("${files_hash}\nbake-manifest-digest ${BAKE_ASSETS_DIGEST}\n")
}

target "_common-rocm" {
  contexts = {
    bake-assets  = "docker-image://${BAKE_ASSETS_REPO}:${BAKE_ASSETS_DIGEST}"
    bake-runtime = "docker-image://${BAKE_RUNTIME_IMAGE}"
  }
  labels = {
    "dev.bake.assets.manifest-digest" = BAKE_ASSETS_DIGEST
  }
}

target "ci-base-rocm" {
  labels = {
    "vllm.ci_base.content_hash" = bake_content_hash(CI_BASE_CONTENT_HASH)
  }
}
