# Example CI override, layered the way vLLM's ROCm CI layers its bake files:
#   docker buildx bake -f docker-bake.hcl -f docker/bake-ci.hcl
# Site specifics live here, never in the base file. Registry cache export needs
# a docker-container builder (`docker buildx create --use`); on the engine's
# default docker driver use `bake build --assets-image` instead (see README).

variable "CI_REGISTRY" {
  description = "Registry the AMD agents pull from."
  default     = "registry.example.internal/rocm-ci"
}

variable "ASSET_MIRRORS" {
  description = "In-house mirrors tried before the public origins."
  default     = "https://www.modelscope.cn/=https://artifacts.example.internal/modelscope/ https://openaipublic.blob.core.windows.net/=https://artifacts.example.internal/openaipublic/"
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
