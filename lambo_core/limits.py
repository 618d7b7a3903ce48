"""Limits from the spec's "Limits" table that several layers share, as plain constants.

Nothing is imported here, so the CLI can build its help texts from these without
loading the library behind them.
"""

WAIT_MS_MAX = 34_000  # the longest wait_ms lambo_stats honours, in milliseconds

# An image per lambo_derive_image or recall by image: 2 MiB decoded, 4096 pixels a side;
# its padded base64 is at most 4 * ceil(MAX_IMAGE_BYTES / 3) characters.
MAX_IMAGE_BYTES = 2 * 1024 * 1024
MAX_BASE64_CHARS = 2_796_204
MAX_IMAGE_SIDE = 4096
# Values in a client vector (lambo_derive_image's vector, lambo_recall's query_vector).
MAX_VECTOR_VALUES = 4096
