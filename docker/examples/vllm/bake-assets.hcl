# -f overlay: take the asset layer of the vLLM-style image from bake's
# content-addressed assets image, the same one `bake build --assets-image`
# publishes, so the whole fleet shares one asset layer (one blob in the
# registry, zero fetches on any builder that can pull it).

variable "BAKE_ASSETS_IMAGE" {
  description = "Assets image reference, REGISTRY/bake-assets:<`bake manifest digest`>."
  default     = ""
  validation {
    condition     = BAKE_ASSETS_IMAGE != ""
    error_message = "Set BAKE_ASSETS_IMAGE to REGISTRY/bake-assets:$(bake manifest digest), the image `bake build --assets-image REGISTRY/bake-assets` publishes."
  }
}

target "vllm-rocm" {
  contexts = {
    bake-assets = "docker-image://${BAKE_ASSETS_IMAGE}"
  }
}
