# Example CI override, layered the way vLLM's ROCm CI layers its bake files:
#   CI_REGISTRY=HOST[:PORT]/PATH docker buildx bake -f docker-bake.hcl -f docker/bake-ci.hcl
# Site specifics live here, never in the base file. Registry cache export needs a
# docker-container builder (`docker buildx create --use`); on the engine's default docker
# driver, publish the asset layer with `bake publish` or `bake build --assets-image` instead.

variable "CI_REGISTRY" {
  description = "Registry (and path) the AMD agents pull from; the registry cache lives there too."
  default     = ""
  validation {
    condition     = CI_REGISTRY != ""
    error_message = "Set CI_REGISTRY to the registry and path your agents pull from: HOST[:PORT]/PATH."
  }
}

variable "ASSET_MIRRORS" {
  description = "In-house mirrors tried before the public origins: PREFIX=REPLACEMENT, space-separated (empty: none)."
  default     = ""
}

target "_common" {
  # Keyed by branch-independent names so the cache survives across commits.
  cache-from = ["type=registry,ref=${CI_REGISTRY}/bake-cache:main"]
  cache-to   = ["type=registry,ref=${CI_REGISTRY}/bake-cache:main,mode=max"]
  secret     = ["id=hf_token,env=HF_TOKEN"]
}

target "docker-metadata-action" {
  tags = ["${CI_REGISTRY}/bake:local"]
}
