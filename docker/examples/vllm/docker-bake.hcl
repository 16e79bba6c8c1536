# A second project's bake file, in the style of vLLM's docker-bake.hcl: it knows
# nothing about bake. The overlay bake-assets.hcl plugs bake's assets image in:
#   BAKE_ASSETS_IMAGE=REGISTRY/bake-assets:$(bake manifest digest) \
#     docker buildx bake -f docker/examples/vllm/docker-bake.hcl \
#       -f docker/examples/vllm/bake-assets.hcl vllm-rocm

variable "BASE_IMAGE" {
  description = "ROCm base image (Dockerfile default: rocm/dev-ubuntu-22.04:7.0-complete)."
  default     = null
}

variable "IMAGE_NAME" {
  description = "Repository name of the image."
  default     = "vllm/vllm-rocm"
}

variable "IMAGE_TAG" {
  description = "Tag of the image."
  default     = "local"
}

target "docker-metadata-action" {
  tags = ["${IMAGE_NAME}:${IMAGE_TAG}"]
}

target "_common" {
  context    = "docker/examples/vllm"
  dockerfile = "Dockerfile"
  args = {
    BASE_IMAGE = BASE_IMAGE
  }
}

target "vllm-rocm" {
  inherits = ["_common", "docker-metadata-action"]
  target   = "vllm-rocm"
}

group "default" {
  targets = ["vllm-rocm"]
}
