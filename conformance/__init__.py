"""sdpa-conformance: property-based conformance suite for cudnn-frontend's SM80 SDPA forward kernels."""

__version__ = "0.1.0"

# The kernel packages this suite was written against; a run on other versions
# is refused with a clear message (kernels.environment.check_versions).
PINNED = {"nvidia-cudnn-frontend": "1.32.0", "nvidia-cutlass-dsl": "4.8.1"}
