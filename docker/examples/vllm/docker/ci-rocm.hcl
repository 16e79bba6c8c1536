# A stand-in for vLLM's CI overlay docker/ci-rocm.hcl:
#   docker buildx bake -f docker/docker-bake-rocm.hcl -f docker/ci-rocm.hcl test-rocm-ci

variable "BUILDKITE_COMMIT" {
  description = "Set by Buildkite; keys the registry cache."
  default     = ""
}

variable "IMAGE_TAG" {
  description = "Where test-rocm-ci pushes the per-commit test image."
  default     = ""
}

variable "CI_BASE_IMAGE_TAG" {
  description = "Where ci-base-rocm-ci pushes ci_base."
  default     = "rocm/vllm-dev:ci_base"
}

variable "CACHE_REPO" {
  description = "Registry cache repository (vLLM: rocm/vllm-ci-cache on Docker Hub); empty: no cache."
  default     = ""
}

function "registry_cache" {
  params = [suffix]
  result = CACHE_REPO == "" || BUILDKITE_COMMIT == "" ? [] : ["type=registry,ref=${CACHE_REPO}:rocm-${BUILDKITE_COMMIT}${suffix}"]
}

target "_ci-rocm" {
  args = {
    CI_BASE_IMAGE = CI_BASE_IMAGE
  }
}

target "test-rocm-ci" {
  inherits   = ["_common-rocm", "_ci-rocm", "_labels"]
  target     = "test"
  cache-from = registry_cache("")
  cache-to   = registry_cache(",mode=min")
  tags       = compact([IMAGE_TAG])
  output     = ["type=registry"]
}

target "export-wheel-rocm" {
  inherits = ["_common-rocm", "_ci-rocm"]
  target   = "export_vllm"
  output   = ["type=local,dest=./wheel-export"]
}

# ci_base with its content-hash label, inline cache, pushed; rebuilt only when the hash moves.
target "ci-base-rocm-ci" {
  inherits   = ["ci-base-rocm"]
  cache-from = compact([CI_BASE_IMAGE_TAG != "" ? "type=registry,ref=${CI_BASE_IMAGE_TAG}" : ""])
  cache-to   = ["type=inline"]
  tags       = compact([CI_BASE_IMAGE_TAG])
  attest     = ["type=provenance,disabled=true"]
  output     = ["type=registry"]
}

# The artifact-only flow: no per-commit image at all. GPU jobs pull ci_base and install
# the exported wheel into it when they start.
group "test-rocm-ci-with-artifacts" {
  targets = ["export-wheel-rocm"]
}
