# A stand-in for vLLM's CI overlay docker/ci-rocm.hcl, with its targets and groups:
#   docker buildx bake -f docker/docker-bake-rocm.hcl -f docker/ci-rocm.hcl test-rocm-ci
# As in vLLM's file, ci-base-rocm-ci inherits only _common-rocm (not ci-base-rocm): the CI
# wrapper (.buildkite/scripts/ci-bake-rocm.sh) puts the content-hash label on it.

variable "BUILDKITE_BUILD_ID" {
  description = "Set by Buildkite; an annotation of the images CI pushes."
  default     = ""
}

variable "IMAGE_TAG" {
  description = "Where test-rocm-ci pushes the per-commit test image."
  default     = ""
}

variable "CI_BASE_IMAGE" {
  description = "The published ci_base per-commit builds start from."
  default     = "rocm/vllm-dev:ci_base"
}

variable "CI_BASE_IMAGE_TAG" {
  description = "Where ci-base-rocm-ci pushes ci_base."
  default     = "rocm/vllm-dev:ci_base"
}

variable "CACHE_REPO" {
  description = "Registry cache repository (vLLM: rocm/vllm-ci-cache on Docker Hub); empty: none."
  default     = ""
}

# Cache exports need a cache-capable builder (vLLM's wrapper sets one up); none without CACHE_REPO.
function "cache_to" {
  params = [name]
  result = CACHE_REPO == "" ? [] : ["type=registry,ref=${CACHE_REPO}:${name},mode=max"]
}

function "cache_from" {
  params = [name]
  result = CACHE_REPO == "" ? [] : ["type=registry,ref=${CACHE_REPO}:${name}"]
}

target "_ci-rocm" {
  annotations = ["manifest:vllm.buildkite.build_id=${BUILDKITE_BUILD_ID}"]
  args = {
    CI_BASE_IMAGE = CI_BASE_IMAGE
  }
}

target "test-rocm-ci" {
  inherits   = ["_common-rocm", "_ci-rocm", "_labels"]
  target     = "test"
  cache-from = cache_from("rocm")
  tags       = compact([IMAGE_TAG])
  output     = ["type=registry"]
}

# The smoke test runs in the test image's graph and exports only its marker.
target "smoke-test-rocm-ci" {
  inherits = ["_common-rocm", "_ci-rocm"]
  target   = "export_test_smoke"
  output   = ["type=local,dest=./build/rocm-smoke-export"]
}

# Cache-only targets: they keep a stage's layers in the registry cache, and export nothing.
target "csrc-rocm-ci" {
  inherits   = ["_common-rocm", "_ci-rocm"]
  target     = "csrc-build"
  cache-from = cache_from("csrc-rocm")
  cache-to   = cache_to("csrc-rocm")
  output     = ["type=cacheonly"]
}

target "rust-rocm-ci" {
  inherits   = ["_common-rocm", "_ci-rocm"]
  target     = "rust-build"
  cache-from = cache_from("rust-rocm")
  cache-to   = cache_to("rust-rocm")
  output     = ["type=cacheonly"]
}

target "nixl-rocm-ci" {
  inherits   = ["_common-rocm", "_ci-rocm"]
  target     = "build_nixl"
  cache-from = cache_from("nixl-rocm")
  cache-to   = cache_to("nixl-rocm")
  output     = ["type=cacheonly"]
}

target "rocshmem-rocm-ci" {
  inherits   = ["_common-rocm", "_ci-rocm"]
  target     = "build_rocshmem"
  cache-from = cache_from("rocshmem-rocm")
  cache-to   = cache_to("rocshmem-rocm")
  output     = ["type=cacheonly"]
}

target "deepep-rocm-ci" {
  inherits   = ["_common-rocm", "_ci-rocm"]
  target     = "build_deepep"
  cache-from = cache_from("deepep-rocm")
  cache-to   = cache_to("deepep-rocm")
  output     = ["type=cacheonly"]
}

target "kernel-symbol-map-rocm" {
  inherits = ["_common-rocm", "_ci-rocm"]
  target   = "kernel-symbol-map-rocm"
  output   = ["type=local,dest=./kernel-symbol-map-rocm"]
}

target "export-wheel-rocm" {
  inherits = ["_common-rocm", "_ci-rocm"]
  target   = "export_vllm"
  output   = ["type=local,dest=./wheel-export"]
}

# The artifact-only flow: GPU jobs pull ci_base and install the exported wheel into it.
group "test-rocm-ci-with-artifacts" {
  targets = ["rust-rocm-ci", "csrc-rocm-ci", "export-wheel-rocm"]
}

# The full test image as well, for fallback and debugging.
group "test-rocm-ci-with-wheel" {
  targets = ["rust-rocm-ci", "csrc-rocm-ci", "test-rocm-ci", "smoke-test-rocm-ci", "export-wheel-rocm"]
}

# ci_base alone, inline cache, no provenance, pushed. Only ci_base depends on bake's images.
target "ci-base-rocm-ci" {
  inherits   = ["_common-rocm"]
  target     = "ci_base"
  cache-from = compact([CI_BASE_IMAGE_TAG != "" ? "type=registry,ref=${CI_BASE_IMAGE_TAG}" : ""])
  cache-to   = ["type=inline"]
  tags       = compact([CI_BASE_IMAGE_TAG])
  attest     = ["type=provenance,disabled=true"]
  output     = ["type=registry"]
}

# ci_base with the dependency stages' caches, so a ci_base rebuild reuses them.
group "ci-base-rocm-ci-with-deps" {
  targets = ["nixl-rocm-ci", "rocshmem-rocm-ci", "deepep-rocm-ci", "ci-base-rocm-ci"]
}
