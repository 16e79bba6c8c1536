# A stand-in for vLLM's docker/docker-bake-rocm.hcl (bake's tests build it; the code is ours).
# Run from the stand-in's root, as vLLM runs it from its repository root:
#   docker buildx bake -f docker/docker-bake-rocm.hcl                  # test-rocm (default)
#   docker buildx bake -f docker/docker-bake-rocm.hcl -f docker/ci-rocm.hcl test-rocm-ci
# CI goes through .buildkite/scripts/ci-bake-rocm.sh, which adds its own -f files.
# Nothing here knows about bake: its layers are pinned COPY lines in Dockerfile.rocm's ci_base.

variable "BASE_IMAGE" {
  description = "ROCm base (Dockerfile default: rocm/vllm-dev:base); the tests pass the debootstrap stand-in."
  default     = null
}

variable "COMMIT" {
  description = "The commit being built, for the OCI revision label."
  default     = ""
}

variable "CI_BASE_CONTENT_HASH" {
  description = "Hash of what decides ci_base; computed by the CI wrapper and kept as a label."
  default     = ""
}

variable "HEAVY_SECONDS" {
  description = "CPU seconds ci_base's stand-in source builds spend (the bench: 60; the tests: 0)."
  default     = "0"
}

variable "CI_BASE_IMAGE" {
  description = "The published ci_base the test stage starts from."
  default     = "rocm/vllm-dev:ci_base"
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
    HEAVY_SECONDS = HEAVY_SECONDS
  }
}

target "_labels-common" {
  labels = {
    "org.opencontainers.image.title"       = "vLLM ROCm (stand-in)"
    "org.opencontainers.image.description" = "bake's stand-in for vLLM's ROCm images"
  }
}

target "_labels" {
  inherits = ["_labels-common"]
  labels = {
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
  inherits = ["_common-rocm", "_labels-common"]
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
