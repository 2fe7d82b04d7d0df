"""The conformance corpus: stores written at test time by third-party writers."""
