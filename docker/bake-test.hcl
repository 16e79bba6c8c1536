# Test override: stand-in bases, the test manifest, and host networking so the
# fetch stage can reach the loopback mirror (dockerd here has no bridge).
#   docker buildx bake -f docker-bake.hcl -f docker/bake-test.hcl --allow=network.host image

variable "BASE_IMAGE" {
  description = "Stand-in for the ROCm base, built by scripts/toolchain.sh."
  default     = "local/rocm-standin:bookworm"
}

variable "FETCH_IMAGE" {
  description = "The stand-in has python3 3.11, enough for the stdlib-only fetch."
  default     = "local/rocm-standin:bookworm"
}

variable "ASSET_MANIFEST" {
  description = "Production vocab plus a generated checkpoint (tests/assets.py)."
  default     = "tests/image/assets.toml"
}

variable "BAKE_FETCH_ARGS" {
  description = "Tests must never reach the origin URLs."
  default     = "--no-origin"
}

variable "IMAGE_NAME" {
  description = "Repository name of the image under test."
  default     = "bake/rocm-test"
}

variable "BAKE_TEST_CA_BUNDLE" {
  description = "CA bundle handed to the fetch stage as the ca_bundle secret (needs --allow=fs.read=FILE)."
  default     = ""
}

target "_common" {
  network = "host"
  # A dummy token, handed over exactly as a real Hub token would be; and, when
  # asked for, the machine's CA, which pip needs to reach PyPI for hf:// sources.
  secret = concat(
    ["id=hf_token,env=BAKE_TEST_HF_TOKEN"],
    BAKE_TEST_CA_BUNDLE == "" ? [] : ["id=ca_bundle,src=${BAKE_TEST_CA_BUNDLE}"],
  )
}
