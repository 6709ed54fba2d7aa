"""sdpa-conformance: property-based conformance suite for cudnn-frontend's SM80 SDPA kernels.

Kept free of imports: importing the ground layer (ground) pulls in
nothing above it.
"""

__version__ = "0.1.0"
