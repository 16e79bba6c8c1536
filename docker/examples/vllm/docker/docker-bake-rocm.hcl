# A stand-in for vLLM's docker/docker-bake-rocm.hcl (bake's tests build it; the code is ours).
# Run from the stand-in's root, as vLLM runs it from its repository root:
#   docker buildx bake -f docker/docker-bake-rocm.hcl                  # test-rocm (default)
#   docker buildx bake -f docker/docker-bake-rocm.hcl -f docker/ci-rocm.hcl test-rocm-ci
# bake's overlay adds the asset layer without touching this file:
#   docker buildx bake -f docker/docker-bake-rocm.hcl -f docker/ci-rocm.hcl -f bake-rocm.hcl …

variable "BASE_IMAGE" {
  description = "ROCm base (Dockerfile default: rocm/vllm-dev:base)."
  default     = null
}

variable "CI_BASE_IMAGE" {
  description = "The published ci_base the test stage starts from."
  default     = "rocm/vllm-dev:ci_base"
}

variable "CI_BASE_CONTENT_HASH" {
  description = "Hash of the files that decide ci_base (tools/ci-base-content-hash.sh), kept as a label."
  default     = ""
}

variable "COMMIT" {
  description = "The commit being built, for the OCI revision label."
  default     = ""
}

group "default" {
  targets = ["test-rocm"]
}

target "_common-rocm" {
  dockerfile = "docker/Dockerfile.rocm"
  context    = "."
  args = {
    BASE_IMAGE    = BASE_IMAGE
    CI_BASE_IMAGE = CI_BASE_IMAGE
  }
}

target "_labels" {
  labels = {
    "org.opencontainers.image.title"    = "vLLM ROCm (stand-in)"
    "org.opencontainers.image.revision" = COMMIT
  }
}

target "test-rocm" {
  inherits = ["_common-rocm", "_labels"]
  target   = "test"
  tags     = ["rocm/vllm:test"]
  output   = ["type=docker"]
}

# ci_base alone, labelled with its content hash so CI can tell when it must be rebuilt.
target "ci-base-rocm" {
  inherits = ["_common-rocm"]
  target   = "ci_base"
  labels = {
    "vllm.ci_base.content_hash" = CI_BASE_CONTENT_HASH
  }
  tags   = ["rocm/vllm-dev:ci_base"]
  output = ["type=docker"]
}

# The wheel and tests, as local files: GPU jobs assemble their image from ci_base plus these.
target "export-wheel-rocm" {
  inherits = ["_common-rocm"]
  target   = "export_vllm"
  output   = ["type=local,dest=./wheel-export"]
}

target "final-rocm" {
  inherits = ["_common-rocm", "_labels"]
  target   = "final"
  tags     = ["rocm/vllm:latest"]
  output   = ["type=docker"]
}
