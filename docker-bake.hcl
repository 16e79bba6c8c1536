# bake: verified asset layers for ROCm CI images.
#
#   docker buildx bake                  # the image (group "default")
#   docker buildx bake assets --set assets.output=type=local,dest=DIR   # DIR/opt/bake/assets/…
#   docker buildx bake tool             # bake itself as an image (ENTRYPOINT bake)
#   docker buildx bake --print          # what would be built, resolved
#
# Site specifics (cache, registries, network) belong in -f override files:
# docker/bake-ci.hcl is an example, docker/bake-test.hcl is what the tests use.

variable "BASE_IMAGE" {
  description = "ROCm base image for the final stage (Dockerfile default: rocm/dev-ubuntu-22.04:7.0-complete)."
  default     = null
}

variable "FETCH_IMAGE" {
  description = "Any image with python3 >= 3.10 that runs the fetch stage (Dockerfile default: python:3.12-slim-bookworm)."
  default     = null
}

variable "ASSET_MANIFEST" {
  description = "Asset manifest (TOML), relative to the build context."
  default     = "docker/assets.toml"
}

variable "ASSET_GROUPS" {
  description = "Space-separated groups to bake, e.g. \"vllm\"; empty bakes every asset."
  default     = ""
}

variable "ASSET_MIRRORS" {
  description = "Space-separated PREFIX=REPLACEMENT URL rewrites, tried before the origin."
  default     = ""
}

variable "ASSET_DIGEST" {
  description = "Expected manifest digest (`bake manifest digest`); the fetch stage fails if the manifest gives another."
  default     = ""
}

variable "BAKE_FETCH_ARGS" {
  description = "Extra `bake fetch` options, e.g. \"--no-origin --connections 8\"."
  default     = ""
}

variable "HF_ENDPOINT" {
  description = "Hub endpoint for hf:// sources (a mirror); unset means huggingface.co."
  default     = null
}

variable "IMAGE_NAME" {
  description = "Repository name of the final image."
  default     = "bake/rocm"
}

variable "TOOL_NAME" {
  description = "Repository name of the bake tool image (bake and bake-entrypoint, no assets)."
  default     = "bake/tool"
}

variable "IMAGE_TAG" {
  description = "Tag of the final image."
  default     = "local"
}

# Overlaid by docker/metadata-action in CI with the real tags and labels.
target "docker-metadata-action" {
  tags = ["${IMAGE_NAME}:${IMAGE_TAG}"]
}

target "_common" {
  context    = "."
  dockerfile = "docker/Dockerfile"
  args = {
    BASE_IMAGE      = BASE_IMAGE
    FETCH_IMAGE     = FETCH_IMAGE
    ASSET_MANIFEST  = ASSET_MANIFEST
    ASSET_GROUPS    = ASSET_GROUPS
    ASSET_MIRRORS   = ASSET_MIRRORS
    ASSET_DIGEST    = ASSET_DIGEST
    BAKE_FETCH_ARGS = BAKE_FETCH_ARGS
    HF_ENDPOINT     = HF_ENDPOINT
  }
  labels = {
    "org.opencontainers.image.title"       = "bake ROCm CI image"
    "org.opencontainers.image.description" = "ROCm base with verified, pre-baked model assets"
    "org.opencontainers.image.version"     = IMAGE_TAG
  }
}

# The verified files alone, FROM scratch. Export it, or use it as a named
# context in another bake file: contexts = { bake-assets = "target:assets" }.
# A named context "assets" on the image target replaces this stage:
#   --set image.contexts.assets=docker-image://REGISTRY/bake-assets:DIGEST@sha256:…
# which `bake build --assets-image REGISTRY/bake-assets` sets, pinned to the digest the
# registry answered (and publishes first).
target "assets" {
  inherits = ["_common"]
  target   = "assets"
}

# tini, bake-entrypoint and bake, FROM scratch. Other projects' images copy it, pinned by
# digest, from the image `bake publish --runtime --repository REPO` pushes (docs/vllm.md).
target "runtime" {
  inherits = ["_common"]
  target   = "runtime"
}

target "image" {
  inherits = ["_common", "docker-metadata-action"]
  target   = "image"
}

# bake itself on a small python3, for agents without Python:
#   docker run --rm --network none -v DIR:/assets:ro bake/tool:local verify --dest /assets
target "tool" {
  inherits = ["_common"]
  target   = "tool"
  tags     = ["${TOOL_NAME}:${IMAGE_TAG}"]
  labels = {
    "org.opencontainers.image.title"       = "bake"
    "org.opencontainers.image.description" = "bake verify, doctor and fetch, and bake-entrypoint, for hosts without Python"
  }
}

group "default" {
  targets = ["image"]
}
